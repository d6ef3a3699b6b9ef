"""Telemetry signed by the node's TPM, as the contract checks it (docs/billing.md, "Attested
telemetry"): `RecordAttestation` carries a node's readings since its previous quote, derives
each GPU's batch digest from them, binds those into the quote's qualifying data and, for a
valid quote, indexes each batch with its counter readings (time, energy counter); `Settle`
accepts a line only when every batch it cites was attested by a quote of the node its GPU is
registered on, and derives the line's measured energy from those counters (`measured_mj`):
the submitter's figure is only compared with it. Plain functions over the shim stub, so
both backends and `ledger verify` apply the same rules."""

from __future__ import annotations

from typing import Any

from attest import readings
from ledger.contract import args as args
from ledger.contract.bill_line import BATCHES, DIGEST, END_MS, MEASURED, START_MS
from ledger.contract.state import ATTESTED_TELEMETRY, GPU, ContractError, get_json, put_json

NONCE_MIN_BYTES, NONCE_MAX_BYTES = 8, 64
Batches = dict[str, list[readings.Reading]]  # each GPU's readings in time order


def parse_readings(req: dict[str, Any]) -> Batches:
    """RecordAttestation's optional `readings`: {gpu uuid: its rows since the node's previous
    quote (CSV text, attest.readings)}, each GPU's in time order. A digest alone (the old
    `telemetry`) is refused: the ledger keeps the counters a bill is derived from."""
    if "telemetry" in req:
        raise args.ArgumentError(
            "telemetry: batch digests alone are not accepted; send readings {gpu: rows}, "
            "whose digests and energy counters every endorser derives"
        )
    value = req.get("readings", {})
    if not isinstance(value, dict) or len(value) > args.MAX_LIST_ITEMS:
        raise args.ArgumentError(
            f"readings: must be an object of at most {args.MAX_LIST_ITEMS} GPUs, "
            f"got {type(value).__name__}"
        )
    out = {}
    for gpu in sorted(value):
        field = f"readings[{gpu!r}]"
        args.identifier({field: gpu}, field)
        text = value[gpu]
        if not isinstance(text, str) or not 0 < len(text) <= readings.MAX_QUOTED_READINGS_CHARS:
            raise args.ArgumentError(
                f"{field}: must be CSV rows of 1-{readings.MAX_QUOTED_READINGS_CHARS} characters"
            )
        try:
            groups = readings.by_gpu(readings.parse_rows(text))
            readings.energy_mj(groups.get(gpu, []))  # two readings at one instant must agree
        except ValueError as exc:
            raise args.ArgumentError(f"{field}: {exc}") from None
        if sorted(groups) != [gpu]:
            raise args.ArgumentError(f"{field}: holds rows of GPUs {sorted(groups)}, not {gpu}")
        out[gpu] = groups[gpu]
    return out


def digests(batches: Batches) -> dict[str, str]:
    """{gpu: batch digest}: what the quote binds, derived from the readings."""
    return {gpu: readings.gpu_digest(r.row for r in rows) for gpu, rows in batches.items()}


def expected_extra_data(req: dict[str, Any]) -> bytes:
    """The qualifying data a RecordAttestation request's quote must carry."""
    nonce = args.hexbytes(req, "nonce", NONCE_MIN_BYTES, NONCE_MAX_BYTES)
    return readings.qualifying_data(nonce, digests(parse_readings(req)))


def check_node_gpus(node: dict[str, Any], telemetry: dict[str, Any]) -> None:
    mine = {g["uuid"] for g in node["gpus"]}
    other = sorted(set(telemetry) - mine)
    if other:
        raise ContractError(
            f"[attest.telemetry_gpu] node {node['node_id']} reports telemetry of {other}, "
            "which are not its GPUs on the ledger"
        )


def mark_key(gpu: str, digest: str) -> str:
    """The state key saying which valid quote attested GPU `gpu`'s batch `digest`: written by
    that RecordAttestation, read by Settle, found by receipts and by audit-bill."""
    return f"{ATTESTED_TELEMETRY}{gpu}:{digest}"


async def record(stub: Any, node_id: str, attestation_id: str, batches: Batches) -> None:
    """Index the batches a valid quote attested, each with its counter readings."""
    for gpu, rows in batches.items():
        mark = {
            "attestation_id": attestation_id,
            "node_id": node_id,
            "counters": [[r.t_ms, r.energy_mj] for r in rows],
        }
        await put_json(stub, mark_key(gpu, readings.gpu_digest(r.row for r in rows)), mark)


def _refuse(rule: str, detail: str) -> ContractError:
    return ContractError(f"[settle.{rule}] {detail}")


async def measured_mj(stub: Any, terms: dict[str, Any], req: dict[str, Any]) -> int:
    """A line's measured energy, derived on this endorser: the counters of the batches it
    cites, each attested by its GPU's node, counted over [start_ms, end_ms] by the one
    definition (attest.readings.energy_mj: increases between readings, restarts not
    counted). Leaving a batch out never adds energy."""
    batches = [readings.Batch(**b) for b in req[BATCHES]]
    derived = readings.evidence_digest(batches)
    if req[DIGEST] != derived:
        raise _refuse(
            "telemetry_digest",
            f"{DIGEST} {req[DIGEST]} is not the digest of the batches it cites ({derived})",
        )
    held = terms["attributed_power_mw"]
    points = []
    for batch in batches:
        if batch.gpu not in held:
            raise _refuse(
                "telemetry_gpu",
                f"batch {batch.digest} is of GPU {batch.gpu}, which the line's terms do not "
                f"hold ({sorted(held)})",
            )
        gpu = await get_json(stub, GPU + batch.gpu)
        mark = await get_json(stub, mark_key(batch.gpu, batch.digest))
        if mark is None or gpu is None or mark["node_id"] != gpu["node_id"]:
            by = f" (attested by node {mark['node_id']})" if mark else ""
            raise _refuse(
                "telemetry_unattested",
                f"batch {batch.digest} of GPU {batch.gpu}: no valid quote of its node "
                f"{gpu and gpu['node_id']} attested it{by}",
            )
        counters = mark.get("counters")
        if counters is None or len(counters) != batch.rows:
            raise _refuse(
                "telemetry_rows",
                f"batch {batch.digest} of GPU {batch.gpu} cites {batch.rows} readings; the "
                f"ledger holds {'none' if counters is None else len(counters)}",
            )
        points += [readings.Reading(t, batch.gpu, mj, "") for t, mj in counters]
    try:
        return readings.energy_mj(readings.within(points, req[START_MS], req[END_MS]))
    except ValueError as exc:  # two cited batches disagree on one instant
        raise _refuse("telemetry_conflict", str(exc)) from None


def check_measured(req: dict[str, Any], derived_mj: int) -> None:
    """The submitter's measured energy is the one the readings show, never its own word."""
    if req[MEASURED] != derived_mj:
        raise _refuse(
            "measured",
            f"{MEASURED} {req[MEASURED]} is not what the cited attested readings show "
            f"over [{req[START_MS]}, {req[END_MS]}]: {derived_mj}",
        )
