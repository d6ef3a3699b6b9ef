"""Connection settings of the Fabric backend, read from the environment and validated at
start-up: each problem names the variable and the value, so a misconfigured deployment
stops at once instead of failing on the first ledger write."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

DEFAULT_CHANNEL = "wattlease"
DEFAULT_CHAINCODE = "wattlease"
DEFAULT_EVALUATE_TIMEOUT_S = 5.0
DEFAULT_ENDORSE_TIMEOUT_S = 15.0
DEFAULT_SUBMIT_TIMEOUT_S = 5.0
DEFAULT_COMMIT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 3600.0
# Fabric channel names: lower case, start with a letter, at most 249 chars (configtx rules).
CHANNEL_RE = re.compile(r"^[a-z][a-z0-9.-]{0,248}$")
CHAINCODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$")
MSP_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
HOST_RE = re.compile(r"^[A-Za-z0-9.-]{1,253}$|^\[[0-9A-Fa-f:]{2,45}\]$")

ENV_VARS = {
    "FABRIC_PEER_ENDPOINT": "host:port of the peer's Gateway service (required)",
    "FABRIC_TLS_CA": "PEM file of the CA that signed the peer's TLS certificate (required)",
    "FABRIC_PEER_HOST_ALIAS": "TLS server name to expect when it differs from the host",
    "FABRIC_TLS_CLIENT_CERT": "PEM client certificate, for peers that require mutual TLS",
    "FABRIC_TLS_CLIENT_KEY": "PEM client key, with FABRIC_TLS_CLIENT_CERT",
    "FABRIC_MSP_ID": "MSP id of the client's organisation, e.g. Org1MSP (required)",
    "FABRIC_MSP_DIR": "MSP folder of the client identity: signcerts/ + keystore/ (required)",
    "FABRIC_CHANNEL": f"channel name (default {DEFAULT_CHANNEL})",
    "FABRIC_CHAINCODE": f"chaincode name (default {DEFAULT_CHAINCODE})",
    "FABRIC_ENDORSING_ORGS": "comma-separated MSP ids to endorse with (default: let the "
    "gateway choose from the endorsement policy)",
    "FABRIC_COMMIT_TIMEOUT_S": f"seconds to wait for a commit (default {DEFAULT_COMMIT_TIMEOUT_S})",
    "FABRIC_CONFIRM_PEERS": "comma-separated host:port=TLS_CA_FILE of other organisations' "
    "peers that must also have committed a transaction before submit returns (read-your-"
    "writes through any organisation's peer; default: only the gateway peer)",
}


class ConfigError(ValueError):
    """A FABRIC_* setting is missing or invalid; the message names it."""


@dataclass(frozen=True)
class FabricSettings:
    endpoint: str
    tls_ca: Path
    msp_id: str
    msp_dir: Path
    channel: str = DEFAULT_CHANNEL
    chaincode: str = DEFAULT_CHAINCODE
    host_alias: str | None = None
    tls_client_cert: Path | None = None
    tls_client_key: Path | None = None
    endorsing_orgs: tuple[str, ...] = ()
    commit_timeout_s: float = DEFAULT_COMMIT_TIMEOUT_S
    confirm_peers: tuple[tuple[str, Path], ...] = ()  # (host:port, TLS CA file)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> FabricSettings:
        env = os.environ if env is None else env

        def required(name: str) -> str:
            value = env.get(name, "").strip()
            if not value:
                raise ConfigError(f"{name} is not set: {ENV_VARS[name]}")
            return value

        def existing_file(name: str, value: str) -> Path:
            path = Path(value)
            if not path.is_file():
                raise ConfigError(f"{name}={value!r}: no such file")
            return path

        def matching(name: str, value: str, pattern: re.Pattern[str]) -> str:
            if not pattern.match(value):
                raise ConfigError(f"{name}={value!r} is not a valid name")
            return value

        endpoint = parse_endpoint(required("FABRIC_PEER_ENDPOINT"))
        msp_dir = Path(required("FABRIC_MSP_DIR"))
        if not msp_dir.is_dir():
            raise ConfigError(f"FABRIC_MSP_DIR={str(msp_dir)!r}: no such folder")
        cert = env.get("FABRIC_TLS_CLIENT_CERT", "").strip()
        key = env.get("FABRIC_TLS_CLIENT_KEY", "").strip()
        if bool(cert) != bool(key):
            raise ConfigError("FABRIC_TLS_CLIENT_CERT and FABRIC_TLS_CLIENT_KEY go together")
        orgs = tuple(
            matching("FABRIC_ENDORSING_ORGS", o.strip(), MSP_ID_RE)
            for o in env.get("FABRIC_ENDORSING_ORGS", "").split(",")
            if o.strip()
        )
        alias = env.get("FABRIC_PEER_HOST_ALIAS", "").strip() or None
        if alias is not None:
            matching("FABRIC_PEER_HOST_ALIAS", alias, HOST_RE)
        return cls(
            endpoint=endpoint,
            tls_ca=existing_file("FABRIC_TLS_CA", required("FABRIC_TLS_CA")),
            msp_id=matching("FABRIC_MSP_ID", required("FABRIC_MSP_ID"), MSP_ID_RE),
            msp_dir=msp_dir,
            channel=matching(
                "FABRIC_CHANNEL", env.get("FABRIC_CHANNEL") or DEFAULT_CHANNEL, CHANNEL_RE
            ),
            chaincode=matching(
                "FABRIC_CHAINCODE", env.get("FABRIC_CHAINCODE") or DEFAULT_CHAINCODE, CHAINCODE_RE
            ),
            host_alias=alias,
            tls_client_cert=existing_file("FABRIC_TLS_CLIENT_CERT", cert) if cert else None,
            tls_client_key=existing_file("FABRIC_TLS_CLIENT_KEY", key) if key else None,
            endorsing_orgs=orgs,
            commit_timeout_s=parse_seconds(
                "FABRIC_COMMIT_TIMEOUT_S",
                env.get("FABRIC_COMMIT_TIMEOUT_S") or str(DEFAULT_COMMIT_TIMEOUT_S),
            ),
            confirm_peers=tuple(
                parse_confirm_peer(item.strip())
                for item in env.get("FABRIC_CONFIRM_PEERS", "").split(",")
                if item.strip()
            ),
        )

    def peer(self, endpoint: str, tls_ca: Path) -> FabricSettings:
        """The same client, connecting to another peer (whose certificate names its host)."""
        return replace(self, endpoint=endpoint, tls_ca=tls_ca, host_alias=None, confirm_peers=())


def parse_endpoint(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not HOST_RE.match(host) or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"FABRIC_PEER_ENDPOINT={value!r}: expected host:port")
    return value


def parse_confirm_peer(value: str) -> tuple[str, Path]:
    endpoint, sep, ca = value.partition("=")
    if not sep:
        raise ConfigError(f"FABRIC_CONFIRM_PEERS item {value!r}: expected host:port=TLS_CA_FILE")
    try:
        parse_endpoint(endpoint)
    except ConfigError:
        raise ConfigError(f"FABRIC_CONFIRM_PEERS item {value!r}: bad host:port") from None
    if not Path(ca).is_file():
        raise ConfigError(f"FABRIC_CONFIRM_PEERS item {value!r}: no such file {ca!r}")
    return endpoint, Path(ca)


def parse_seconds(name: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not a number of seconds") from None
    if not 0 < seconds <= MAX_TIMEOUT_S:
        raise ConfigError(f"{name}={value!r}: must be in (0, {MAX_TIMEOUT_S:.0f}]")
    return seconds
