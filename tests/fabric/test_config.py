from __future__ import annotations

from pathlib import Path

import pytest

from chaincode_client.fabric.config import ConfigError, FabricSettings
from tests.fabric.pki import make_msp, make_tls_ca


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "FABRIC_PEER_ENDPOINT": "127.0.0.1:7051",
        "FABRIC_TLS_CA": str(make_tls_ca(tmp_path)),
        "FABRIC_MSP_ID": "Org1MSP",
        "FABRIC_MSP_DIR": str(make_msp(tmp_path / "msp")),
    }


def test_reads_the_required_settings_and_defaults(env: dict[str, str]):
    settings = FabricSettings.from_env(env)
    assert (settings.endpoint, settings.channel, settings.chaincode) == (
        "127.0.0.1:7051",
        "wattlease",
        "wattlease",
    )
    assert settings.endorsing_orgs == ()


def test_reads_endorsing_orgs_and_alias(env: dict[str, str]):
    env.update(FABRIC_ENDORSING_ORGS="Org1MSP, Org2MSP", FABRIC_PEER_HOST_ALIAS="peer0.org1")
    settings = FabricSettings.from_env(env)
    assert settings.endorsing_orgs == ("Org1MSP", "Org2MSP")
    assert settings.host_alias == "peer0.org1"


@pytest.mark.parametrize(
    "name", ["FABRIC_PEER_ENDPOINT", "FABRIC_TLS_CA", "FABRIC_MSP_ID", "FABRIC_MSP_DIR"]
)
def test_a_missing_required_setting_is_named(env: dict[str, str], name: str):
    del env[name]
    with pytest.raises(ConfigError, match=f"{name} is not set"):
        FabricSettings.from_env(env)


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("FABRIC_PEER_ENDPOINT", "peer0:notaport", "expected host:port"),
        ("FABRIC_PEER_ENDPOINT", "peer0:70000", "expected host:port"),
        ("FABRIC_TLS_CA", "/nonexistent/ca.pem", "no such file"),
        ("FABRIC_MSP_DIR", "/nonexistent", "no such folder"),
        ("FABRIC_CHANNEL", "Bad Channel", "not a valid name"),
        ("FABRIC_MSP_ID", "Org 1", "not a valid name"),
        ("FABRIC_COMMIT_TIMEOUT_S", "-1", "must be in"),
        ("FABRIC_COMMIT_TIMEOUT_S", "soon", "not a number"),
        ("FABRIC_TLS_CLIENT_CERT", "/x.pem", "go together"),
    ],
)
def test_an_invalid_setting_is_named_with_its_value(
    env: dict[str, str], name: str, value: str, why: str
):
    env[name] = value
    with pytest.raises(ConfigError, match=why) as info:
        FabricSettings.from_env(env)
    assert name in str(info.value)
