"""One bill-line schema (ledger.contract.bill_line): the Settle arguments the scheduler builds,
the fields the contract parses and records, and the fields the auditor compares are the same
set, named in one place; a Settle the scheduler builds is accepted by the contract."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.audit import bill as audit_bill
from ledger.contract import bill_line
from ledger.contract import billing as contract_billing
from scheduler.settlement import AttestedBatch, settle
from scheduler.telemetry.sample import TelemetrySample
from tests.ledger.conftest import ORG1, approve_pcr_policy, embedded_backend
from tests.ledger.helpers import (
    H100,
    attest,
    counter_readings,
    digests_of,
    js,
    lease_request,
    lease_terms,
    now_ms,
    readings_for,
    register_node,
    settle_request,
)

GPU = "GPU-line0"
HOUR_MS = 3_600_000
BOARD_W = 700  # H100 SXM board power: the line draws it for its whole interval


@pytest.fixture
def ledger(tmp_path, node_tpm):
    """An embedded ledger with node n1 (one H100) registered and attested, and its client."""
    with embedded_backend(tmp_path) as env:
        approve_pcr_policy(env, node_tpm.golden)
        client = env.clients[ORG1]
        register_node(client, node_tpm, "n1", 0, [(GPU, H100)])
        yield client, attest(client, node_tpm, "n1", 0, readings_for([GPU]))["attestation_id"]


def test_the_contract_parses_exactly_the_fields_the_builder_writes():
    request = settle_request("L", 0, _terms(), 0, HOUR_MS, 5)
    assert tuple(request) == bill_line.SETTLE_ARGS
    assert tuple(contract_billing.parse_request(request)) == bill_line.SETTLE_ARGS


def test_the_auditor_compares_every_figure_of_a_line_by_the_schemas_names():
    compared = set(audit_bill.COMPARED.values()) | set(audit_bill.INTERVAL)
    # the rates are compared wherever the bill states them (it states all: `document`)
    assert compared | set(bill_line.CLAIMED_RATES) == set(bill_line.FIGURES)
    assert set(audit_bill.COMPARED) == {bill_line.stored(n) for n in bill_line.DOCUMENT_FIELDS}
    document = bill_line.document(settle_request("L", 0, _terms(), 0, HOUR_MS, 5))
    assert set(document) == set(audit_bill.COMPARED) | {"interval", "rates"}


def test_a_missing_figure_is_named_by_the_builder():
    figures = dict(settle_request("L", 0, _terms(), 0, HOUR_MS, 5))
    del figures[bill_line.MEASURED]
    with pytest.raises(KeyError, match=rf"bill line L#0: no {bill_line.MEASURED}"):
        bill_line.settle_args("L", 0, figures)


def test_a_settle_the_scheduler_builds_is_recorded_as_the_schema_says(ledger, node_tpm):
    client, att = ledger
    start = now_ms() - HOUR_MS
    end = start + HOUR_MS // 2
    created = client.submit("CreateLease", lease_request("B1", [GPU], [att], start_ms=start))
    terms = json.loads(created.payload)["terms"]
    drawn_mj = BOARD_W * (end - start)
    rows = counter_readings([GPU], [(start, 0), (end, drawn_mj)])
    attest(client, node_tpm, "n1", 0, rows)
    samples = tuple(
        TelemetrySample(GPU, t, mj, 0, 0, 0, 0) for t, mj in ((start, 0), (end, drawn_mj))
    )
    batch = AttestedBatch(GPU, digests_of(rows)[GPU], samples)

    line = settle("B1", 0, terms, [batch], start, end, final=True)
    request = line.request()
    assert tuple(request) == bill_line.SETTLE_ARGS
    record = json.loads(client.submit("Settle", js(request)).payload)

    assert set(record) == set(bill_line.RECORDED)
    assert {k: record[k] for k in bill_line.SETTLE_ARGS} == request
    assert record[bill_line.MEASURED] == drawn_mj and record["total_micro"] > 0
    # the bill document of that line states what the ledger recorded, field by field
    document = bill_line.document(record)
    for mine, theirs in audit_bill.COMPARED.items():
        assert document[mine] == record[theirs]


def _terms() -> dict:
    return lease_terms([GPU], start_ms=0)


RENAMED = "measured_energy_mj_renamed"
RENAME_CHECK = """
import json, sys
from ledger.audit import bill as audit_bill
from ledger.contract import attested_telemetry, bill_line, billing
from scheduler.settlement import AttestedBatch, settle, telemetry_digest
from scheduler.telemetry.sample import TelemetrySample

terms = json.loads(sys.argv[1])
gpu = sorted(terms["attributed_power_mw"])[0]
samples = tuple(TelemetrySample(gpu, t, mj, 0, 0, 0, 0) for t, mj in ((0, 0), (60_000, 6_000_000)))
line = settle("L", 0, terms, [AttestedBatch(gpu, telemetry_digest(samples), samples)], 0, 60_000)
request = billing.parse_request(json.loads(json.dumps(line.request())))
attested_telemetry.check_measured(request, 6_000_000)
billing.check_measurement(terms, 700, request)
billing.line_of(terms, request)
print(json.dumps({"request": sorted(request), "compared": sorted(audit_bill.COMPARED.values()),
                  "document": sorted(bill_line.document(request))}))
"""


def test_renaming_a_lines_field_is_one_line_for_builder_contract_and_auditor(tmp_path):
    """The measured energy's name, changed on its one line in bill_line.py (a copy of the
    tree): the scheduler builds, the contract parses and checks, the auditor compares it
    under the new name, and the old one is gone."""
    root = Path(__file__).resolve().parents[2]
    for package in ("attest", "ledger", "scheduler"):
        shutil.copytree(root / package, tmp_path / package)
    schema = tmp_path / "ledger/contract/bill_line.py"
    line = f'MEASURED = "{bill_line.MEASURED}"'
    text = schema.read_text()
    assert text.count(line) == 1
    schema.write_text(text.replace(line, f'MEASURED = "{RENAMED}"'))
    terms = json.dumps(lease_terms([GPU], start_ms=0))
    result = subprocess.run(
        [sys.executable, "-c", RENAME_CHECK, terms],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert RENAMED in seen["request"] and RENAMED in seen["compared"]
    assert bill_line.MEASURED not in seen["request"] + seen["compared"] + seen["document"]
