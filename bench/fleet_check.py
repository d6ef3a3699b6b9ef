"""The fleet bench's check that nothing is lost: every valid quote sent is stored once and
on the ledger, every reading sent is stored once, every batch re-hashes to its digest from
the stored readings, and a lease's bill cites every attested batch of its GPUs in its
interval, with readings (as the tenant downloads them) that re-hash to the cited digests.
Plain SQL and HTTP against the deployment: nothing of the server is imported."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import psycopg

from attest import readings

WAIT_S = 180.0
POLL_S = 1.0
GPUS_PER_LEASE = 8


def _call(deployed: Any, method: str, path: str, body: dict | None = None) -> Any:
    request = urllib.request.Request(
        deployed.base + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {deployed.api_key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
        return (
            raw.decode() if response.headers.get_content_type() == "text/csv" else json.loads(raw)
        )


def request_lease(deployed: Any) -> int:
    """A tenant's lease of one node's GPUs for one leased hour (LEASE_HOUR_S wall seconds)."""
    body = {"gpu_count": GPUS_PER_LEASE, "precision": "FP16", "hours": "1"}
    return int(_call(deployed, "POST", "/api/v1/leases/", body)["id"])


def _wait(what: str, check) -> bool:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(POLL_S)
    return False


def check_nothing_lost(deployed: Any, nodes: list, lease_id: int | None) -> dict[str, Any]:
    db = psycopg.connect(deployed.database_url, autocommit=True)
    one = lambda sql, *args: db.execute(sql, args).fetchone()[0]  # noqa: E731
    lost: list[str] = []
    drained = _wait(
        "the outbox to drain",
        lambda: one("SELECT count(*) FROM outbox_outboxentry WHERE done IS NULL") == 0,
    )
    if lease_id is not None:
        settled = _wait(
            "the lease to be settled",
            lambda: one("SELECT state FROM leasing_lease WHERE id = %s", lease_id) == "settled",
        )
        drained = drained and _wait(
            "its lines on the ledger",
            lambda: one("SELECT count(*) FROM outbox_outboxentry WHERE done IS NULL") == 0,
        )
        if not settled:
            lost.append(f"lease {lease_id} was not settled within {WAIT_S:.0f} s")
    if not drained:
        lost.append("the outbox did not drain")
    sent_quotes = sum(len(n.sent_quotes) for n in nodes)
    sent_readings = sum(n.sent_readings for n in nodes)
    valid = one("SELECT count(*) FROM attestation_attestation WHERE valid")
    unrecorded = one("SELECT count(*) FROM attestation_attestation WHERE valid AND ledger_tx = ''")
    stored = one("SELECT count(*) FROM fleet_telemetrysample")
    batches = db.execute(
        "SELECT b.id, g.id, g.uuid, b.digest, b.first_ms, b.last_ms, b.rows, a.valid "
        "FROM attestation_telemetrybatch b JOIN fleet_gpu g ON g.id = b.gpu_id "
        "JOIN attestation_attestation a ON a.id = b.attestation_id"
    ).fetchall()
    rows: dict[int, list[tuple[int, str]]] = {}
    for gpu_id, uuid, *fields in db.execute(
        "SELECT s.gpu_id, g.uuid, s.t_ms, s.energy_mj, s.power_mw, s.util_gpu_pct, "
        "s.util_mem_pct, s.temp_c FROM fleet_telemetrysample s "
        "JOIN fleet_gpu g ON g.id = s.gpu_id ORDER BY s.gpu_id, s.t_ms"
    ):
        row = readings.row_text([fields[0], uuid, *fields[1:]])
        rows.setdefault(gpu_id, []).append((fields[0], row))
    broken = 0
    for _, gpu_id, _, digest, first, last, count, _ in batches:
        mine = [r for t, r in rows.get(gpu_id, []) if first <= t <= last]
        if len(mine) != count or readings.gpu_digest(mine) != digest:
            broken += 1
    if valid != sent_quotes:
        lost.append(f"{sent_quotes} valid quotes sent, {valid} stored")
    if unrecorded:
        lost.append(f"{unrecorded} valid attestations not on the ledger")
    if stored != sent_readings:
        lost.append(f"{sent_readings} readings sent, {stored} stored")
    if len(batches) != sent_quotes * GPUS_PER_LEASE:
        lost.append(f"{len(batches)} batches for {sent_quotes} quotes of 8 GPUs")
    if broken:
        lost.append(f"{broken} batches do not re-hash from the stored readings")
    bill = _bill(deployed, db, lease_id, batches, lost) if lease_id is not None else {}
    db.close()
    return {
        "sent_quotes": sent_quotes,
        "stored_valid_attestations": valid,
        "sent_readings": sent_readings,
        "stored_readings": stored,
        "batches": len(batches),
        **bill,
        "lost": lost,
    }


def _bill(deployed: Any, db: Any, lease_id: int, batches: list, lost: list[str]) -> dict:
    """Every valid batch of the lease's GPUs with a reading in a line's interval is cited by
    that line, and the line's readings re-hash to what it cites."""
    gpus = {
        uuid
        for (uuid,) in db.execute(
            "SELECT g.uuid FROM leasing_lease_gpus lg JOIN fleet_gpu g ON g.id = lg.gpu_id "
            "WHERE lg.lease_id = %s",
            [lease_id],
        )
    }
    lines = db.execute(
        "SELECT seq, start_ms, end_ms, telemetry_batches FROM leasing_settlement "
        "WHERE lease_id = %s ORDER BY seq",
        [lease_id],
    ).fetchall()
    if not lines:
        lost.append(f"lease {lease_id} has no bill line")
    cited_total = 0
    for seq, start, end, cited in lines:
        cited_set = {(b["gpu"], b["digest"]) for b in cited}
        cited_total += len(cited_set)
        wanted = {
            (uuid, digest)
            for _, _, uuid, digest, first, last, _, valid in batches
            if valid and uuid in gpus and first <= end and last >= start
        }
        if wanted - cited_set:
            lost.append(f"line {seq}: {len(wanted - cited_set)} attested batches not cited")
        text = _call(deployed, "GET", f"/api/v1/leases/{lease_id}/readings/?seq={seq}")
        if _rehashed(text, cited) != [(b["gpu"], b["digest"]) for b in cited]:
            lost.append(f"line {seq}: its readings do not re-hash to the batches it cites")
    return {"lease_gpus": len(gpus), "bill_lines": len(lines), "bill_batches": cited_total}


def _rehashed(text: str, cited: list[dict]) -> list[tuple[str, str]]:
    """Each cited batch's digest from the served rows, split as audit-bill splits them: each
    GPU's rows in order, `rows` at a time."""
    by_gpu: dict[str, list[str]] = {}
    for r in readings.parse_rows(text):
        by_gpu.setdefault(r.gpu, []).append(r.row)
    out = []
    for b in cited:
        mine = by_gpu.get(b["gpu"], [])
        out.append((b["gpu"], readings.gpu_digest(mine[: b["rows"]])))
        by_gpu[b["gpu"]] = mine[b["rows"] :]
    return out
