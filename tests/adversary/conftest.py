"""Shared fixtures of the adversarial suite: a real embedded ledger (both organisations
endorsing, real swtpm quotes, keys and certificates generated at run time) holding what an
attacker starts from, and the files an auditor runs `audit-bill` on.

`billed` is the story every receipt and bill attack starts from, built once per session:
- node n1 (GPU-a, GPU-b), attested by a swtpm quote that also bound GPU-a's and GPU-b's
  readings (the batches every line cites);
- lease L1 of tenant-a on GPU-a: line 0 (the first hour), then two Settles of line 1 (the
  next half hour) endorsed on the same state and ordered into one block, so the block marks
  the second MVCC_READ_CONFLICT: the transaction a peer operator would relabel VALID;
- lease L2 of tenant-b on GPU-b: line 0.
The ledger is closed after building; tests export receipts from its file, never change it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from chaincode_client.embedded import EmbeddedClient
from ledger.audit.receipt import export_receipt
from ledger.engine import EmbeddedLedger
from ledger.engine.endorser import make_proposal
from tests.ledger.conftest import (  # noqa: F401  (the contract attacks run on every backend)
    ORG1,
    NodeTpm,
    StepClock,
    boot_policy,
    ledger_client,
    ledger_env,
    node_tpm,
    swtpm_node,
)
from tests.ledger.helpers import (
    BOOT_POLICY,
    H100,
    approve_on_engine,
    attest,
    batches_of,
    bill_line,
    bill_of,
    counter_readings,
    js,
    lease_request,
    now_ms,
    org_roots,
    pcr_policy,
    register_node,
    settle_request,
)

HOUR_MS = 3_600_000
HALF_HOUR_MS = HOUR_MS // 2
LINE_MJ = 1_800_000_000  # an hour at 500 W
TENANT_A, TENANT_B = "tenant-a", "tenant-b"
RATE_FIELDS = ("capacity_micro_per_gpu_hour", "pue_milli", "tariff_micro_per_kwh")


@dataclass(frozen=True)
class Billed:
    path: Path  # the closed ledger's SQLite file
    roots: dict[str, bytes]  # each organisation's CA, from its own key folder
    lines: dict[str, list[dict[str, Any]]]  # lease -> its bill lines, as the API serves them
    conflicting: dict[str, Any]  # the MVCC-invalid Settle's txs row: block, txnum, tx_id, code

    def receipt(self, lease: str) -> dict[str, Any]:
        return export_receipt(self.path, lease)

    def bill(self, tenant: str, leases: list[str]) -> dict[str, Any]:
        """The bill `GET /api/v1/bills/` serves the tenant (webapp.leasing.bills.bill)."""
        lines = [copy.deepcopy(line) for lease in leases for line in self.lines[lease]]
        return bill_of(lines, tenant)


@pytest.fixture(scope="session")
def adversary_tpm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeTpm]:
    with swtpm_node(tmp_path_factory.mktemp("adversary-swtpm"), aks=1) as tpm:
        yield tpm


@pytest.fixture(scope="session")
def billed(tmp_path_factory: pytest.TempPathFactory, adversary_tpm: NodeTpm) -> Billed:
    path = tmp_path_factory.mktemp("adversary-ledger") / "ledger.sqlite"
    ledger = EmbeddedLedger.open(path, block_size=10, block_timeout_s=0.002)
    clock = StepClock()
    client = EmbeddedClient(ledger, ledger.enroll(ORG1, "web-app"), clock_ns=clock)
    try:
        lines = _story(ledger, client, clock, adversary_tpm)
    finally:
        ledger.close()
    with sqlite3.connect(path) as conn:
        block, txnum, tx_id, code = conn.execute(
            "SELECT block, txnum, tx_id, code FROM txs WHERE code = 'MVCC_READ_CONFLICT'"
        ).fetchone()
    conflicting = {"block": block, "txnum": txnum, "tx_id": tx_id, "code": code}
    return Billed(path, org_roots(path), lines, conflicting)


def _story(
    ledger: EmbeddedLedger, client: EmbeddedClient, clock: StepClock, tpm: NodeTpm
) -> dict[str, list[dict[str, Any]]]:
    approve_on_engine(ledger, BOOT_POLICY, pcr_policy(tpm.golden), clock)
    register_node(client, tpm, "n1", 0, [("GPU-a", H100), ("GPU-b", H100)])
    start = now_ms() - 3 * HOUR_MS
    # the readings the quote binds: each GPU's counter rises LINE_MJ an hour (the contract
    # derives each line's measured energy from them), and a later batch of GPU-a
    hours = [(start + k * HALF_HOUR_MS, k * LINE_MJ // 2) for k in range(4)]
    rows = counter_readings(["GPU-a", "GPU-b"], hours)
    att = attest(client, tpm, "n1", 0, rows)["attestation_id"]
    later = counter_readings(["GPU-a"], [(start + 2 * HOUR_MS, 2 * LINE_MJ)])
    attest(client, tpm, "n1", 0, later)
    out: dict[str, list[dict[str, Any]]] = {}
    for lease, gpu, tenant in (("L1", "GPU-a", TENANT_A), ("L2", "GPU-b", TENANT_B)):
        created = client.submit(
            "CreateLease", lease_request(lease, [gpu], [att], tenant=tenant, start_ms=start)
        )
        terms = json.loads(created.payload)["terms"]
        cited = [b for b in batches_of(rows) if b.gpu == gpu]
        first = settle_request(lease, 0, terms, start, start + HOUR_MS, LINE_MJ, batches=cited)
        settled = client.submit("Settle", js(first))
        out[lease] = [api_line(first, settled.tx_id, settled.block_number)]
    terms = json.loads(client.evaluate("GetLease", js({"lease_id": "L1"})))["terms"]
    # line 1 of L1 twice, endorsed on one state: the second is MVCC-invalid at commit (it
    # also cites the later batch, which adds no energy to the half hour: another request)
    cited = [b for b in batches_of(rows) if b.gpu == "GPU-a"]
    second = [
        settle_request(
            "L1",
            1,
            terms,
            start + HOUR_MS,
            start + HOUR_MS + HALF_HOUR_MS,
            LINE_MJ // 2,
            batches=batches,
        )
        for batches in (cited, cited + batches_of(later))
    ]
    envelopes = [ledger.endorse(*_proposal(ledger, client, js(r), clock()))[1] for r in second]
    futures = [ledger.order(e) for e in envelopes]
    results = [f.result() for f in futures]
    assert [r.code for r in results] == ["VALID", "MVCC_READ_CONFLICT"], results
    out["L1"].append(api_line(second[0], results[0].tx_id, results[0].block_number))
    out["L1-conflicting"] = [api_line(second[1], results[1].tx_id, results[1].block_number)]
    return out


def api_line(request: dict[str, Any], tx_id: str, block: int) -> dict[str, Any]:
    """A bill line as the API serves it (webapp.leasing.bills.line): the fields audit-bill
    compares, with the rates, generation, block and validation code beside them."""
    line = bill_line(request, tx_id)
    line["generation"] = H100
    line["rates"] = {k: request[k] for k in RATE_FIELDS}
    line["evidence"].update(block=block, validation_code="VALID")
    return line


def _proposal(
    ledger: EmbeddedLedger, client: EmbeddedClient, request: str, now_ns: int
) -> tuple[bytes, bytes]:
    return make_proposal(
        client.identity, ledger.channel, "Settle", [request], now_ns, os.urandom(24)
    )


def relabelled(billed: Billed, lease: str = "L1") -> dict[str, Any]:
    """The lease's receipt with the MVCC-invalid Settle added and labelled VALID, as a peer
    operator would hand it out: its envelope is the one the block holds, so every hash and
    signature still checks."""
    receipt = billed.receipt(lease)
    bad = billed.conflicting
    with sqlite3.connect(billed.path) as conn:
        envelopes = [
            bytes(e)
            for (e,) in conn.execute(
                "SELECT envelope FROM txs WHERE block = ? ORDER BY txnum", (bad["block"],)
            )
        ]
    entry = {
        "block": bad["block"],
        "txnum": bad["txnum"],
        "tx_id": bad["tx_id"],
        "code": "VALID",
        "envelope": envelopes[bad["txnum"]].decode(),
        "block_tx_hashes": [hashlib.sha256(e).hexdigest() for e in envelopes],
    }
    receipt["transactions"].append(entry)
    receipt["transactions"].sort(key=lambda t: (t["block"], t["txnum"]))
    return receipt


def write_audit_inputs(
    folder: Path, bill: dict[str, Any], receipts: dict[str, dict[str, Any]], roots: dict
) -> tuple[Path, Path, Path]:
    """bill.json, receipts/<lease>.json and roots/<MSPID>.pem, as a tenant downloads them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "receipts").mkdir(exist_ok=True)
    (folder / "roots").mkdir(exist_ok=True)
    for lease, receipt in receipts.items():
        (folder / "receipts" / f"{lease}.json").write_text(json.dumps(receipt))
    for msp, pem in roots.items():
        (folder / "roots" / f"{msp}.pem").write_bytes(pem)
    (folder / "bill.json").write_text(json.dumps(bill))
    return folder / "bill.json", folder / "receipts", folder / "roots"
