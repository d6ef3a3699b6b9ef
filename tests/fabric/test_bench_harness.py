"""The bench harness: both clients end to end against a recording gateway (this checks the
harness, it measures nothing about Fabric), and a default workload the contract accepts."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from fabric_protos.peer import chaincode_pb2, proposal_pb2

from attest import tpm_constants as C
from attest.public import encode_ecc_public, parse_public
from bench.fabric_clients import DEFAULT_FN, approve_policy, default_template, fill, software_aks
from chaincode_client.embedded import EmbeddedClient
from chaincode_client.fabric_network.ccaas_server import PER_MESSAGE_WARNING
from chaincode_client.fabric_network.network import Network
from ledger.engine import EmbeddedLedger
from tests.fabric.pki import make_msp
from tests.fabric.recording_gateway import recording_gateway
from tests.ledger.helpers import engine_admins

BENCH = Path(__file__).resolve().parents[2] / "bench" / "fabric_bench.py"


def test_bench_drives_both_clients_and_reports_throughput(tmp_path: Path):
    msp = make_msp(tmp_path)
    with recording_gateway() as (recorder, port):
        out = subprocess.run(
            [
                sys.executable,
                str(BENCH),
                "--count",
                "20",
                "--concurrency",
                "4",
                "--plaintext",
                f"127.0.0.1:{port}",
                "--msp-id",
                "Org1MSP",
                "--msp-dir",
                str(msp),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["python"]["committed"] == report["node"]["committed"] == 20
    assert report["plaintext_harness_check"] is True
    assert len(recorder.requests["Submit"]) == 40
    node_ids = set()
    for endorse in recorder.requests["Endorse"]:
        proposal = proposal_pb2.Proposal.FromString(endorse.proposed_transaction.proposal_bytes)
        payload = proposal_pb2.ChaincodeProposalPayload.FromString(proposal.payload)
        spec = chaincode_pb2.ChaincodeInvocationSpec.FromString(payload.input).chaincode_spec
        node_ids.add(json.loads(spec.input.args[1])["node_id"])
    assert len(node_ids) == 40  # every transaction writes fresh keys: no MVCC conflicts


def test_default_workload_passes_the_contracts_checks_on_the_embedded_ledger(tmp_path: Path):
    template = default_template("Org1MSP")
    ledger = EmbeddedLedger.open(tmp_path / "l.sqlite", block_timeout_s=0.001)
    try:
        approve_policy(*engine_admins(ledger))
        client = EmbeddedClient(ledger, ledger.enroll("Org1MSP", "bench"))
        aks = software_aks(3)
        run = template.replace("RUN", "r1")
        receipts = [client.submit(DEFAULT_FN, fill(run, i, aks)) for i in range(3)]
    finally:
        ledger.close()
    assert all(r.valid for r in receipts)
    nodes = [json.loads(r.payload) for r in receipts]
    assert [n["node_id"] for n in nodes] == ["bench-r1-0", "bench-r1-1", "bench-r1-2"]
    assert [n["ak_public"] for n in nodes] == aks  # one AK, one node: the contract's rule


def test_default_workload_gives_each_transaction_its_own_restricted_signing_p256_ak():
    assert json.loads(default_template("Org2MSP"))["org"] == "Org2MSP"
    aks = software_aks(2)
    for ak in aks:
        area = parse_public(base64.b64decode(ak))
        assert area.has_attributes(C.AK_REQUIRED_ATTRS) and area.describe() == "ECC-P256"
    assert aks[0] != aks[1]


def test_a_software_ak_round_trips_through_the_parser():
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    area = parse_public(encode_ecc_public(key, C.AK_REQUIRED_ATTRS))
    assert area.public_key().public_numbers() == key.public_numbers()
    assert area.scheme == C.ALG_ECDSA and area.scheme_hash == C.ALG_SHA256


@pytest.mark.fabric
def test_bench_runs_both_clients_on_a_real_network_and_names_the_busiest_process(
    fabric_network: Network, tmp_path: Path
):
    """The bench's own mode on the session's real network (tiny counts: this checks that the
    bench still runs end to end, it is not a figure)."""
    layout = fabric_network.layout
    out = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--network",
            str(layout.root),
            "--base-port",
            str(layout.base_port),
            "--keep-up",
            "--levels",
            "1,4",
            "--count",
            "6",
            "--repeats",
            "1",
            "--warmup",
            "2",
            "--out",
            str(tmp_path / "report.json"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["bring_up_s"] >= 0 and not report["bring_up_fresh_folder"]
    assert [level["level"] for level in report["levels"]] == [1, 4]
    processes = set(layout.process_names())
    for level in report["levels"]:
        assert sorted(r["client"] for r in level["runs"]) == ["node", "python"]
        for run in level["runs"]:
            assert run["committed"] == 6 and run["tx_per_s"] > 0 and run["p99_ms"] > 0
            cores = run["cpu"]["cores"]
            assert processes | {f"client ({run['client']})"} <= set(cores)
            assert run["cpu"]["top_process"] in cores
        assert level["python_over_node_best"] > 0
    assert fabric_network.is_up()  # --keep-up left the session's network running
    for org in layout.orgs:  # the chaincode servers' logs carry no per-message warning
        assert PER_MESSAGE_WARNING not in layout.log_file(org.ccaas_name).read_text()
