"""`ledger verify` catches tampering and survives kill -9; receipts re-check offline."""

from __future__ import annotations

import base64
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from chaincode_client.embedded import EmbeddedClient
from ledger.audit import chain as audit
from ledger.audit.chain import AuditReport, verify_ledger
from ledger.audit.receipt import export_receipt, verify_receipt
from ledger.engine import EmbeddedLedger
from ledger.engine.validate import DictState
from tests.ledger.conftest import ORG1, StepClock
from tests.ledger.helpers import (
    BOOT_POLICY,
    H100,
    approve_on_engine,
    attest,
    batches_of,
    challenge,
    counter_readings,
    js,
    lease_request,
    now_ms,
    org_roots,
    pcr_policy,
    quote_request,
    readings_for,
    register_node,
    settle_request,
)

ROOT = Path(__file__).resolve().parents[2]
CRASH_ACKS_BEFORE_KILL = 150
HOUR_MS = 3_600_000
SETTLED_MJ = 1_800_000_000  # an hour at 500 W


@pytest.fixture
def chain(tmp_path: Path, node_tpm) -> Path:
    """A closed ledger with a node, two attestations, a lease, a settlement and one
    MVCC-invalid transaction."""
    path = tmp_path / "ledger.sqlite"
    ledger = EmbeddedLedger.open(path, block_size=10, block_timeout_s=0.002)
    clock = StepClock()
    client = EmbeddedClient(ledger, ledger.enroll(ORG1, "ops"), clock_ns=clock)
    approve_on_engine(ledger, BOOT_POLICY, pcr_policy(node_tpm.golden), clock)
    register_node(client, node_tpm, "n1", 0, [("GPU-a", H100), ("GPU-b", H100)])
    att = attest(client, node_tpm, "n1", 0)["attestation_id"]
    start = now_ms() - 2 * HOUR_MS
    hour = counter_readings(["GPU-a"], [(start, 0), (start + HOUR_MS, SETTLED_MJ)])
    attest(client, node_tpm, "n1", 0, hour)  # re-verified with its binding
    lease = client.submit("CreateLease", lease_request("L1", ["GPU-a"], [att], start_ms=start))
    terms = json.loads(lease.payload)["terms"]
    request = settle_request(
        "L1", 0, terms, start, start + HOUR_MS, SETTLED_MJ, batches=batches_of(hour)
    )
    client.submit("Settle", js(request))
    # two endorsed leases of GPU-b ordered into one block: the second is MVCC-invalid
    first = ledger.endorse(*_proposal(ledger, client, "L2", clock()))[1]
    second = ledger.endorse(*_proposal(ledger, client, "L3", clock()))[1]
    futures = [ledger.order(first), ledger.order(second)]
    assert [f.result().code for f in futures] == ["VALID", "MVCC_READ_CONFLICT"]
    ledger.close()
    return path


def _proposal(ledger, client, lease_id, now_ns):
    from ledger.engine.endorser import make_proposal

    return make_proposal(
        client.identity,
        ledger.channel,
        "CreateLease",
        [lease_request(lease_id, ["GPU-b"], [_att_of(ledger)])],
        now_ns,
        os.urandom(24),
    )


def _att_of(ledger) -> str:
    return next(
        json.loads(v)["attestation_id"]
        for k, (v, _) in ledger.store.state.items()
        if k.startswith("att:")
    )


def _sql(path: Path, statement: str, *params) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(statement, params)


def _tx(path: Path, fn: str) -> tuple[int, int, str, dict]:
    with sqlite3.connect(path) as conn:
        for block, txnum, tx_id, envelope in conn.execute(
            "SELECT block, txnum, tx_id, envelope FROM txs WHERE block > 0"
        ):
            outer = json.loads(envelope)
            if json.loads(outer["proposal"])["fn"] == fn:
                return block, txnum, tx_id, outer
    raise AssertionError(f"no {fn} transaction")


def defects(path: Path) -> list[str]:
    return [str(d) for d in verify_ledger(path).defects]


def test_untampered_chain_verifies_including_quotes(chain):
    report = verify_ledger(chain)
    assert report.ok, report.defects
    # the PCR policy's proposal and approval, 2 challenges + 2 attestations + node, lease,
    # settlement, one of the racing leases
    assert report.quotes == 2 and report.valid == 10 and report.transactions == 11


def test_a_retried_attestation_verifies_and_a_false_retry_is_named(tmp_path, node_tpm):
    """A relay killed after its RecordAttestation committed sends it again: the contract
    answers with the recorded attestation and writes nothing, and the audit accepts that
    transaction only as a retry of the attestation recorded for its nonce."""
    path = tmp_path / "ledger.sqlite"
    ledger = EmbeddedLedger.open(path, block_size=10, block_timeout_s=0.002)
    clock = StepClock()
    client = EmbeddedClient(ledger, ledger.enroll(ORG1, "ops"), clock_ns=clock)
    approve_on_engine(ledger, BOOT_POLICY, pcr_policy(node_tpm.golden), clock)
    register_node(client, node_tpm, "n1", 0, [("GPU-a", H100)])
    request = quote_request(node_tpm, "n1", 0, challenge(client, "n1"), readings_for(["GPU-a"]))
    first = client.submit("RecordAttestation", js(request))
    again = client.submit("RecordAttestation", js(request))
    assert again.payload == first.payload and again.tx_id != first.tx_id
    state = DictState()
    state.values.update(ledger.store.state)
    ledger.close()
    report = verify_ledger(path)
    assert report.ok, report.defects
    assert report.quotes == 1

    other = quote_request(node_tpm, "n1", 0, bytes.fromhex(request["nonce"]))
    proposal = {"fn": "RecordAttestation", "args": [js(other)]}
    found = AuditReport()
    audit._check_retry(proposal, {}, state, "block 9 tx 0 (forged)", found)
    assert [d.what for d in found.defects] == [
        f"a RecordAttestation that recorded no attestation is not a retry of the one recorded "
        f"for nonce {request['nonce']} ({json.loads(first.payload)['attestation_id']})"
    ]


def test_cli_exit_codes(chain):
    ok = subprocess.run(
        [sys.executable, "-m", "ledger", "verify", "--path", str(chain)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    _sql(chain, "UPDATE blocks SET hash = ? WHERE number = 2", "f" * 64)
    bad = subprocess.run(
        [sys.executable, "-m", "ledger", "verify", "--path", str(chain)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and "DEFECT block 2: block hash" in bad.stdout


def test_edited_state_row_is_named(chain):
    _sql(chain, "UPDATE state SET value = ? WHERE key = 'lease:L1'", b'{"tenant":"me"}')
    found = defects(chain)
    assert len(found) == 1 and found[0].startswith("state key 'lease:L1'")
    assert "last written by block" in found[0]


def test_deleted_and_inserted_state_rows_are_named(chain):
    _sql(chain, "DELETE FROM state WHERE key = 'gpulease:GPU-a'")
    _sql(chain, "INSERT INTO state VALUES ('gpulease:GPU-x', X'7b7d', 1, 0)")
    found = " | ".join(defects(chain))
    assert "state key 'gpulease:GPU-a'" in found and "state key 'gpulease:GPU-x'" in found


def test_edited_transaction_is_named(chain):
    block, txnum, tx_id, outer = _tx(chain, "CreateLease")
    outer["response"] = outer["response"].replace("tenant-a", "tenant-z")
    _sql(
        chain,
        "UPDATE txs SET envelope = ? WHERE block = ? AND txnum = ?",
        json.dumps(outer).encode(),
        block,
        txnum,
    )
    found = defects(chain)
    assert f"block {block}: data_hash does not match" in " | ".join(found)
    assert (
        f"block {block} tx {txnum} ({tx_id}): recorded VALID, recomputed ENDORSEMENT_POLICY_FAILURE"
    ) in found


def test_edited_block_hash_is_named(chain):
    _sql(chain, "UPDATE blocks SET hash = ? WHERE number = 3", "0" * 64)
    found = defects(chain)
    assert "block 3: block hash does not match its header" in found
    assert "block 4: previous_hash does not match the hash of block 3" in found


def test_forged_endorsement_signature_is_named(chain):
    block, txnum, tx_id, outer = _tx(chain, "Settle")
    sig = bytearray(base64.b64decode(outer["endorsements"][1]["signature"]))
    sig[-1] ^= 0x01
    outer["endorsements"][1]["signature"] = base64.b64encode(bytes(sig)).decode()
    _sql(
        chain,
        "UPDATE txs SET envelope = ? WHERE block = ? AND txnum = ?",
        json.dumps(outer).encode(),
        block,
        txnum,
    )
    assert (
        f"block {block} tx {txnum} ({tx_id}): recorded VALID, recomputed ENDORSEMENT_POLICY_FAILURE"
    ) in defects(chain)


def test_flipped_validation_code_is_named(chain):
    with sqlite3.connect(chain) as conn:
        block, txnum, tx_id = conn.execute(
            "SELECT block, txnum, tx_id FROM txs WHERE code = 'MVCC_READ_CONFLICT'"
        ).fetchone()
    _sql(chain, "UPDATE txs SET code = 'VALID' WHERE block = ? AND txnum = ?", block, txnum)
    assert (
        f"block {block} tx {txnum} ({tx_id}): recorded VALID, recomputed MVCC_READ_CONFLICT"
    ) in defects(chain)


def test_lease_receipt_rechecks_offline_and_detects_edits(chain, tmp_path):
    roots = org_roots(chain)
    receipt = export_receipt(chain, "L1")
    fns = [json.loads(json.loads(e["envelope"])["proposal"])["fn"] for e in receipt["transactions"]]
    # the second RecordAttestation bound the readings the Settle cites
    assert fns == [
        "RegisterNode",
        "IssueChallenge",
        "RecordAttestation",
        "RecordAttestation",
        "CreateLease",
        "Settle",
    ]
    assert verify_receipt(json.loads(json.dumps(receipt)), roots) == []
    out, roots_dir = tmp_path / "L1.json", tmp_path / "roots"
    for command in (
        ["receipt", "--path", str(chain), "--lease", "L1", "--out", str(out)],
        ["roots", "--path", str(chain), "--out", str(roots_dir)],
    ):
        assert subprocess.run([sys.executable, "-m", "ledger", *command], cwd=ROOT).returncode == 0
    check = subprocess.run(
        [sys.executable, "-m", "ledger", "verify-receipt", str(out), "--roots", str(roots_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0 and check.stdout.strip() == "OK"
    outer = json.loads(receipt["transactions"][-1]["envelope"])
    response = json.loads(outer["response"])
    for write in response["rwset"]["writes"]:
        if write[0].startswith("\x00settlement\x00"):
            line = json.loads(base64.b64decode(write[1]))
            line["total_micro"] += 1  # a bill line the contract did not compute
            write[1] = base64.b64encode(json.dumps(line).encode()).decode()
    outer["response"] = json.dumps(response)
    receipt["transactions"][-1]["envelope"] = json.dumps(outer)
    found = verify_receipt(receipt, roots)
    assert any("envelope does not hash to its place" in d for d in found), found
    assert any("ENDORSEMENT_POLICY_FAILURE" in d for d in found), found
    total = line["total_micro"] - 1
    settle = receipt["transactions"][-1]
    where = f"block {settle['block']} tx {settle['txnum']} ({settle['tx_id']})"
    assert f"{where}: settlement total_micro {total + 1} != recomputed {total}" in found, found
    assert verify_receipt({"config": 1}, roots)[0].startswith("receipt is malformed")


def test_receipt_of_a_channel_made_up_on_the_spot_is_refused(chain, tmp_path, node_tpm):
    """Whoever makes a channel of their own can sign a whole consistent receipt; it checks
    out only against that channel's CAs, never against the organisations the auditor trusts."""
    made_up = tmp_path / "made-up.sqlite"
    ledger = EmbeddedLedger.open(made_up, block_size=10, block_timeout_s=0.002)
    client = EmbeddedClient(ledger, ledger.enroll(ORG1, "mallory"))
    approve_on_engine(ledger, BOOT_POLICY, pcr_policy(node_tpm.golden))
    register_node(client, node_tpm, "n1", 0, [("GPU-a", H100)])
    att = attest(client, node_tpm, "n1", 0)["attestation_id"]
    client.submit("CreateLease", lease_request("L1", ["GPU-a"], [att]))
    ledger.close()
    forged = export_receipt(made_up, "L1")
    assert verify_receipt(forged, org_roots(made_up)) == []  # consistent in itself
    found = verify_receipt(forged, org_roots(chain))
    assert found == [
        f"channel config: the CA of {org} is not the one you trust" for org in (ORG1, "Org2MSP")
    ]
    # the whole-ledger audit checks its genesis against trusted roots the same way
    assert verify_ledger(made_up, roots=org_roots(made_up)).ok
    audit = verify_ledger(made_up, roots=org_roots(chain))
    assert [str(d) for d in audit.defects] == [f"block 0: {d}" for d in found]
    empty = tmp_path / "no-roots"
    empty.mkdir()
    refused = subprocess.run(
        [sys.executable, "-m", "ledger", "verify-receipt", "x.json", "--roots", str(empty)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "holds no <MSPID>.pem" in refused.stderr


def test_kill_9_mid_stream_loses_no_acknowledged_transaction(tmp_path):
    path = tmp_path / "ledger.sqlite"
    for round_ in range(2):  # the second round restarts on the crashed file
        child = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/ledger/crash_child.py"), str(path), f"r{round_}"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        acked = []
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("ACK "):
                acked.append(line.split()[1])
                if len(acked) >= CRASH_ACKS_BEFORE_KILL:
                    break
        child.send_signal(signal.SIGKILL)
        child.wait()
        report = verify_ledger(path)
        assert report.ok, report.defects[:5]
        with sqlite3.connect(path) as conn:
            committed = {
                row[0] for row in conn.execute("SELECT tx_id FROM txs WHERE code = 'VALID'")
            }
        missing = [tx for tx in acked if tx not in committed]
        assert not missing, f"{len(missing)} acknowledged transactions missing"
    ledger = EmbeddedLedger.open(path)  # and the engine carries on from the tip
    client = EmbeddedClient(ledger, ledger.enroll(ORG1, "after"))
    assert client.evaluate("GetNode", js({"node_id": "r0-0-0"}))
    ledger.close()


def test_an_audit_of_a_ledger_that_goes_on_committing_reads_one_snapshot(tmp_path, node_tpm):
    """A running relay commits while `ledger verify` reads: blocks read at one height and
    the state table at a later one showed every newer write as a defect (found by the
    kill -9 deployment test, where the attestation watch keeps attesting)."""
    path = tmp_path / "ledger.sqlite"
    ledger = EmbeddedLedger.open(path, block_size=1, block_timeout_s=0.002)
    clock = StepClock()
    client = EmbeddedClient(ledger, ledger.enroll(ORG1, "ops"), clock_ns=clock)
    approve_on_engine(ledger, BOOT_POLICY, pcr_policy(node_tpm.golden), clock)
    register_node(client, node_tpm, "n1", 0, [("GPU-a", H100)])
    reading = audit._Chain(path)
    height = len(reading.blocks())
    attest(client, node_tpm, "n1", 0)  # commits while the audit is reading
    assert len(reading.blocks()) == height
    assert not any(key.startswith("att:") for key in reading.state())
    original = audit._Chain
    try:  # verify_ledger itself, with a block committed between its first and last read

        class Racing(original):
            def state(self):
                attest(client, node_tpm, "n1", 0)
                return super().state()

        audit._Chain = Racing
        report = verify_ledger(path)
    finally:
        audit._Chain = original
    ledger.close()
    assert report.ok, report.defects
