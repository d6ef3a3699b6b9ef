"""Telemetry signed by the node's TPM, as the contract checks it (docs/billing.md, "Attested
telemetry"): `RecordAttestation` binds a node's batch digests into the quote's qualifying
data and indexes those a valid quote attested; `Settle` accepts a line only when every batch
it cites was attested by a quote of the node its GPU is registered on. Plain functions over
the shim stub, so both backends and `ledger verify` apply the same rules."""

from __future__ import annotations

from typing import Any

from attest import readings
from ledger.contract import args as args
from ledger.contract.state import ATTESTED_TELEMETRY, GPU, ContractError, get_json, put_json

MAX_BATCHES = 256  # per bill line: ~130 bytes each keeps Settle's argument under 64 KiB
MAX_BATCH_ROWS = 10**6  # one GPU's readings between two quotes
DIGEST_BYTES = 32
NONCE_MIN_BYTES, NONCE_MAX_BYTES = 8, 64


def parse_telemetry(req: dict[str, Any]) -> dict[str, str]:
    """RecordAttestation's optional `telemetry`: {gpu uuid: batch digest (hex SHA-256)}."""
    value = req.get("telemetry", {})
    if not isinstance(value, dict) or len(value) > args.MAX_LIST_ITEMS:
        raise args.ArgumentError(
            f"telemetry: must be an object of at most {args.MAX_LIST_ITEMS} GPUs, "
            f"got {type(value).__name__}"
        )
    out = {}
    for gpu in sorted(value):
        field = f"telemetry[{gpu!r}]"
        args.identifier({field: gpu}, field)
        out[gpu] = args.hexbytes(value, gpu, DIGEST_BYTES, DIGEST_BYTES).hex()
    return out


def expected_extra_data(req: dict[str, Any]) -> bytes:
    """The qualifying data a RecordAttestation request's quote must carry."""
    nonce = args.hexbytes(req, "nonce", NONCE_MIN_BYTES, NONCE_MAX_BYTES)
    return readings.qualifying_data(nonce, parse_telemetry(req))


def check_node_gpus(node: dict[str, Any], telemetry: dict[str, str]) -> None:
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


async def record(stub: Any, node_id: str, attestation_id: str, telemetry: dict[str, str]) -> None:
    """Index the batches a valid quote attested."""
    for gpu, digest in telemetry.items():
        mark = {"attestation_id": attestation_id, "node_id": node_id}
        await put_json(stub, mark_key(gpu, digest), mark)


def parse_batches(req: dict[str, Any]) -> list[readings.Batch]:
    """Settle's `telemetry_batches`: [{gpu, digest, rows}], at most MAX_BATCHES."""
    value = req.get("telemetry_batches", [])
    if not isinstance(value, list) or len(value) > MAX_BATCHES:
        raise args.ArgumentError(
            f"telemetry_batches: must be a list of at most {MAX_BATCHES} batches"
        )
    out = []
    for i, item in enumerate(value):
        where = f"telemetry_batches[{i}]"
        if not isinstance(item, dict) or set(item) != {"gpu", "digest", "rows"}:
            raise args.ArgumentError(f"{where}: must be an object with gpu, digest and rows")
        out.append(
            readings.Batch(
                args.identifier(item, "gpu"),
                args.hexbytes(item, "digest", DIGEST_BYTES, DIGEST_BYTES).hex(),
                args.integer(item, "rows", 1, MAX_BATCH_ROWS),
            )
        )
    if len({(b.gpu, b.digest) for b in out}) != len(out):
        raise args.ArgumentError("telemetry_batches: a batch is cited twice")
    return out


async def check_line(stub: Any, terms: dict[str, Any], req: dict[str, Any]) -> None:
    """A line's telemetry is the batches it cites, each attested by its GPU's node."""
    batches = [readings.Batch(**b) for b in req["telemetry_batches"]]
    derived = readings.evidence_digest(batches)
    if req["telemetry_digest"] != derived:
        raise ContractError(
            f"[settle.telemetry_digest] telemetry_digest {req['telemetry_digest']} is not the "
            f"digest of the batches it cites ({derived})"
        )
    if req["measured_mj"] > 0 and not batches:
        raise ContractError(
            f"[settle.telemetry_unattested] measured_mj {req['measured_mj']} cites no "
            "attested readings"
        )
    held = terms["attributed_power_mw"]
    for batch in batches:
        if batch.gpu not in held:
            raise ContractError(
                f"[settle.telemetry_gpu] batch {batch.digest} is of GPU {batch.gpu}, which the "
                f"line's terms do not hold ({sorted(held)})"
            )
        gpu = await get_json(stub, GPU + batch.gpu)
        mark = await get_json(stub, mark_key(batch.gpu, batch.digest))
        if mark is None or gpu is None or mark["node_id"] != gpu["node_id"]:
            by = f" (attested by node {mark['node_id']})" if mark else ""
            raise ContractError(
                f"[settle.telemetry_unattested] batch {batch.digest} of GPU {batch.gpu}: no "
                f"valid quote of its node {gpu and gpu['node_id']} attested it{by}"
            )
