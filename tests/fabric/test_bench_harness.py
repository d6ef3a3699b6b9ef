"""The bench harness runs both clients end to end (against a recording gateway: this checks
the harness, it measures nothing about Fabric)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fabric_protos.peer import chaincode_pb2, proposal_pb2

from tests.fabric.pki import make_msp
from tests.fabric.recording_gateway import recording_gateway

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
