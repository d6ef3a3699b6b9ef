"""`python -m attest verify` on the files tpm2-tools 5.4 writes, against a real swtpm."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from attest.cli import main
from attest.verifier import verify_quote


def tools(node, *args: str, cwd) -> None:
    env = {**os.environ, "TPM2TOOLS_TCTI": node.tcti}
    subprocess.run(args, env=env, cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def evidence(tmp_path_factory, tools_node):
    d = tmp_path_factory.mktemp("tools")
    nonce = os.urandom(20).hex()
    tools(
        tools_node,
        "tpm2_createak",
        "-C",
        "0x81010001",
        "-c",
        "ak.ctx",
        "-G",
        "ecc",
        "-g",
        "sha256",
        "-s",
        "ecdsa",
        "-u",
        "ak.pub",
        "-f",
        "tss",
        "-n",
        "ak.name",
        cwd=d,
    )
    tools(tools_node, "tpm2_readpublic", "-c", "ak.ctx", "-f", "pem", "-o", "ak.pem", cwd=d)
    tools(tools_node, "tpm2_flushcontext", "-t", cwd=d)
    tools(
        tools_node,
        "tpm2_quote",
        "-c",
        "ak.ctx",
        "-l",
        "sha256:0,2,7",
        "-q",
        nonce,
        "-m",
        "msg",
        "-s",
        "sig",
        "-o",
        "pcrs",
        "-g",
        "sha256",
        cwd=d,
    )
    tools(tools_node, "tpm2_flushcontext", "-t", cwd=d)
    tools(tools_node, "tpm2_pcrread", "sha256:0,2,7", "-o", "pcrs.values", cwd=d)
    return d, nonce


def run(capsys, d, nonce, *extra: str, ak="ak.pub", pcrs="pcrs", msg="msg"):
    argv = [
        "verify",
        "--ak-public",
        str(d / ak),
        "--message",
        str(d / msg),
        "--signature",
        str(d / "sig"),
        "--pcrs",
        str(d / pcrs),
        "--nonce",
        nonce,
        *extra,
    ]
    code = main(argv)
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out else None), err


@pytest.mark.swtpm
def test_tpm2_tools_quote_verifies(capsys, evidence) -> None:
    d, nonce = evidence
    code, verdict, _ = run(capsys, d, nonce)
    assert code == 0 and verdict["valid"] is True
    assert [r["code"] for r in verdict["reasons"]] == ["policy_default"]
    assert bytes.fromhex(verdict["ak_name"]) == (d / "ak.name").read_bytes()


@pytest.mark.swtpm
def test_pcrread_values_file_is_accepted(capsys, evidence) -> None:
    d, nonce = evidence
    code, verdict, _ = run(capsys, d, nonce, pcrs="pcrs.values")
    assert code == 0, verdict


@pytest.mark.swtpm
def test_pem_ak_verifies_with_a_warning(capsys, evidence) -> None:
    d, nonce = evidence
    code, verdict, _ = run(capsys, d, nonce, ak="ak.pem")
    assert code == 0
    assert "ak_attributes_unchecked" in [r["code"] for r in verdict["reasons"]]
    assert verdict["ak_attributes_checked"] is False


@pytest.mark.swtpm
def test_policy_with_golden_values(capsys, evidence, tmp_path) -> None:
    d, nonce = evidence
    good = (d / "pcrs.values").read_bytes()
    policy = tmp_path / "policy.json"
    policy.write_text(
        json.dumps({"pcrs": {"sha256": {"0": good[:32].hex(), "2": None, "7": good[64:].hex()}}})
    )
    assert run(capsys, d, nonce, "--policy", str(policy))[0] == 0
    policy.write_text(json.dumps({"pcrs": {"sha256": {"0": None, "2": None, "7": "11" * 32}}}))
    code, verdict, _ = run(capsys, d, nonce, "--policy", str(policy))
    assert code == 1
    assert [r["code"] for r in verdict["reasons"]] == ["pcr_value_mismatch"]


@pytest.mark.swtpm
def test_wrong_nonce_exits_1(capsys, evidence) -> None:
    d, _ = evidence
    code, verdict, _ = run(capsys, d, os.urandom(20).hex())
    assert code == 1 and verdict["valid"] is False
    assert verdict["reasons"][0]["code"] == "nonce_mismatch"


@pytest.mark.swtpm
@pytest.mark.parametrize(
    "target,content,reason",
    [
        ("msg", b"\xff\x54\x43\x47garbage", "quote_malformed"),
        ("pcrs", b"\x00" * 95, "pcr_file_malformed"),
        ("ak.pub", os.urandom(90), "ak_malformed"),
    ],
)
def test_malformed_input_exits_1(capsys, evidence, tmp_path, target, content, reason) -> None:
    d, nonce = evidence
    for name in ("ak.pub", "msg", "sig", "pcrs"):
        (tmp_path / name).write_bytes((d / name).read_bytes())
    (tmp_path / target).write_bytes(content)
    code, verdict, _ = run(capsys, tmp_path, nonce)
    assert code == 1
    assert verdict["reasons"][0]["code"] == reason


@pytest.mark.swtpm
def test_usage_and_io_errors_exit_2(capsys, evidence, tmp_path) -> None:
    d, nonce = evidence
    assert run(capsys, d, nonce, ak="missing.pub")[0] == 2
    assert run(capsys, d, "not-hex")[0] == 2
    (tmp_path / "p.json").write_text('{"pcrs": {"sha256": {"0": "zz"}}}')
    assert run(capsys, d, nonce, "--policy", str(tmp_path / "p.json"))[0] == 2
    assert main(["verify"]) == 2
    assert main([]) == 2


@pytest.mark.swtpm
def test_module_entry_point_and_agent_cli(tools_node, evidence, tmp_path) -> None:
    """`python -m attest agent enrol/quote` then `python -m attest verify`, as separate
    processes, the way a node agent and an auditor would run them."""
    state = tmp_path / "agent.json"
    base = [
        sys.executable,
        "-m",
        "attest",
        "agent",
        "--tcti",
        tools_node.tcti,
        "--state",
        str(state),
    ]
    enrol = json.loads(
        subprocess.run([*base, "enrol"], check=True, capture_output=True, timeout=60).stdout
    )
    nonce = os.urandom(32)
    out = subprocess.run(
        [*base, "quote", "--nonce", nonce.hex()], check=True, capture_output=True, timeout=60
    )
    ev = json.loads(out.stdout)
    values = {
        b: {int(p): bytes.fromhex(v) for p, v in vs.items()} for b, vs in ev["pcr_values"].items()
    }
    verdict = verify_quote(
        bytes.fromhex(enrol["ak_public"]),
        bytes.fromhex(ev["quote"]),
        bytes.fromhex(ev["signature"]),
        values,
        nonce,
    )
    assert verdict.valid, verdict.reasons
    for name, data in (
        ("ak.pub", enrol["ak_public"]),
        ("msg", ev["quote"]),
        ("sig", ev["signature"]),
    ):
        (tmp_path / name).write_bytes(bytes.fromhex(data))
    (tmp_path / "pcrs").write_bytes(b"".join(values["sha256"][p] for p in (0, 2, 7)))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "attest",
            "verify",
            "--ak-public",
            str(tmp_path / "ak.pub"),
            "--message",
            str(tmp_path / "msg"),
            "--signature",
            str(tmp_path / "sig"),
            "--pcrs",
            str(tmp_path / "pcrs"),
            "--nonce",
            nonce.hex(),
        ],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout
    assert json.loads(done.stdout)["valid"] is True
    bad = subprocess.run(
        [*base, "--tcti", "swtpm:host=127.0.0.1,port=1", "quote", "--nonce", "00"],
        capture_output=True,
        timeout=60,
    )
    assert bad.returncode == 2
