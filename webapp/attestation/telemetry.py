"""The readings a node's agent sends with its quote (docs/billing.md, "Attested telemetry"):
checked, stored once as samples (fleet.TelemetrySample, what the dashboards read too), and
referenced by one batch per GPU beside the attestation whose quote bound their digests.
A bill line cites only batches of valid quotes."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import NamedTuple

from django.db.models import Max

from attest import readings
from scheduler.settlement import AttestedBatch
from scheduler.telemetry.replay import parse_row
from scheduler.telemetry.sample import CSV_FIELDS, TelemetrySample
from webapp.attestation.models import Attestation, TelemetryBatch
from webapp.fleet.models import GPU, Node
from webapp.fleet.models import TelemetrySample as StoredSample
from webapp.fleet.telemetry import GpuRef, gpu_refs, record_samples

# what one quote may bind: the readings travel whole to the ledger (RecordAttestation)
MAX_TELEMETRY_CHARS = readings.MAX_QUOTED_READINGS_CHARS


class TelemetryRefused(ValueError):
    """The readings cannot be bound into a quote; the message names the line or GPU."""


class NodeReadings(NamedTuple):
    groups: dict[str, list[readings.Reading]]  # each GPU's readings, in time order
    gpus: dict[str, GpuRef]  # those GPUs, every one the node's


def parse(node: Node, text: str) -> NodeReadings:
    """Each GPU's readings in time order and the GPUs, looked up once (keep stores them by
    it), or TelemetryRefused naming what is wrong."""
    if len(text) > MAX_TELEMETRY_CHARS:
        raise TelemetryRefused(f"telemetry: {len(text)} characters, limit {MAX_TELEMETRY_CHARS}")
    try:
        groups = readings.by_gpu(readings.parse_rows(text))
        for gpu, rows in groups.items():
            for before, after in pairwise(rows):  # stored once, keyed by (GPU, instant)
                if after.t_ms == before.t_ms:
                    raise ValueError(f"GPU {gpu} has two readings at t_ms {after.t_ms}")
            for number, row in enumerate(rows, start=1):
                parse_row(row.row.encode(), number)  # each value within the sample's range
    except ValueError as exc:
        raise TelemetryRefused(f"telemetry: {exc}") from None
    gpus = gpu_refs(groups, node=node)
    foreign = sorted(set(groups) - set(gpus))
    if foreign:
        raise TelemetryRefused(f"telemetry: {foreign} are not GPUs of {node.name}")
    return NodeReadings(groups, gpus)


def digests(groups: dict[str, list[readings.Reading]]) -> dict[str, str]:
    """{gpu: batch digest}, what the quote binds (attest.readings)."""
    return readings.gpu_digests(r for rows in groups.values() for r in rows)


def texts(groups: dict[str, list[readings.Reading]]) -> dict[str, str]:
    """{gpu: its rows, each ending in a newline}: a batch as stored and as the ledger's
    RecordAttestation takes it (the contract derives the digests and counters from them)."""
    return {gpu: "".join(r.row + "\n" for r in rows) for gpu, rows in groups.items()}


def keep(attestation: Attestation, parsed: NodeReadings) -> None:
    """Store the readings once (fleet.TelemetrySample) and each GPU's batch beside its
    attestation as a reference to them. A reading already stored at the same instant must
    be the same reading: otherwise the stored rows would no longer re-hash to the digest the
    quote bound, and the telemetry is refused (TelemetryRefused names the GPU)."""
    groups, refs = parsed
    if not groups:
        return
    by_uuid = {uuid: ref.id for uuid, ref in refs.items()}
    record_samples(samples(r for rows in groups.values() for r in rows), refs)
    batches = [
        TelemetryBatch(
            attestation=attestation,
            gpu_id=by_uuid[gpu],
            digest=digest,
            first_ms=groups[gpu][0].t_ms,
            last_ms=groups[gpu][-1].t_ms,
            rows=len(groups[gpu]),
        )
        for gpu, digest in digests(groups).items()
    ]
    stored = stored_rows(batches)
    for batch in batches:
        if readings.gpu_digest(stored.get(batch.pk_key(), [])) != batch.digest:
            uuid = next(u for u, i in by_uuid.items() if i == batch.gpu_id)
            raise TelemetryRefused(
                f"telemetry: GPU {uuid} already has other readings between t_ms "
                f"{batch.first_ms} and {batch.last_ms} (another source reports it)"
            )
    TelemetryBatch.objects.bulk_create(batches)


def stored_rows(batches: Sequence[TelemetryBatch]) -> dict[tuple[int, int, int], list[str]]:
    """Each batch's canonical rows, read back from where they are kept: its `evidence`, else
    the GPU's rows of fleet.TelemetrySample from its first to its last instant. Keyed by
    TelemetryBatch.pk_key (GPU id, first_ms, last_ms); one query for all of them."""
    out: dict[tuple[int, int, int], list[str]] = {}
    live = []
    for b in batches:
        if b.evidence:
            out[b.pk_key()] = b.evidence.splitlines()
        else:
            live.append(b)
    if not live:
        return out
    wanted = {b.gpu_id for b in live}
    rows = (
        StoredSample.objects.filter(
            gpu_id__in=wanted,
            t_ms__gte=min(b.first_ms for b in live),
            t_ms__lte=max(b.last_ms for b in live),
        )
        .order_by("gpu_id", "t_ms")
        .values_list("gpu_id", *("gpu__uuid" if f == "gpu" else f for f in CSV_FIELDS))
    )
    by_gpu: dict[int, list[tuple[int, str]]] = {}
    for gpu_id, *fields in rows:
        by_gpu.setdefault(gpu_id, []).append((fields[0], readings.row_text(fields)))
    for b in live:
        kept = by_gpu.get(b.gpu_id, [])
        lo = bisect_left(kept, b.first_ms, key=lambda r: r[0])
        hi = bisect_right(kept, b.last_ms, key=lambda r: r[0])
        out[b.pk_key()] = [row for _, row in kept[lo:hi]]
    return out


def samples(rows: Iterable[readings.Reading]) -> list[TelemetrySample]:
    return [parse_row(r.row.encode(), n) for n, r in enumerate(rows, start=1)]


def _as_samples(rows: list[str]) -> tuple[TelemetrySample, ...]:
    return tuple(parse_row(row.encode(), n) for n, row in enumerate(rows, start=1))


def attested_batches(gpus: Sequence[GPU], start_ms: int, end_ms: int) -> list[AttestedBatch]:
    """The batches of `gpus` with readings in [start_ms, end_ms] that a valid quote bound:
    the only readings a bill line measures (the relay sends the line only once those quotes
    are on the ledger, reactions.wait_for_attested_batches)."""
    stored = list(
        TelemetryBatch.objects.filter(
            gpu__in=gpus, first_ms__lte=end_ms, last_ms__gte=start_ms, attestation__valid=True
        ).select_related("gpu")
    )
    rows = stored_rows(stored)
    return [AttestedBatch(b.gpu.uuid, b.digest, _as_samples(rows[b.pk_key()])) for b in stored]


def attested_through(gpus: Sequence[GPU], t_ms: int) -> bool:
    """Whether a valid quote has bound a batch of every one of `gpus` that reaches `t_ms`:
    an agent sends a GPU's readings in time order, so its attested readings up to `t_ms`
    are then all in (a line settled earlier would leave the rest unbilled for good)."""
    newest = (
        TelemetryBatch.objects.filter(gpu__in=gpus, attestation__valid=True)
        .values("gpu")
        .annotate(t=Max("last_ms"))
        .values_list("t", flat=True)
    )
    seen = list(newest.order_by())
    return len(seen) == len(gpus) and all(t >= t_ms for t in seen)


def cited_batches(
    gpu_batches: Iterable[dict[str, object]],
) -> dict[tuple[str, str], TelemetryBatch]:
    """(gpu, digest) -> the valid batch, for batches a bill line cites ([{gpu, digest, rows}])."""
    cited = [(str(b["gpu"]), str(b["digest"])) for b in gpu_batches]
    found = TelemetryBatch.objects.filter(
        gpu__uuid__in={gpu for gpu, _ in cited},
        digest__in={digest for _, digest in cited},
        attestation__valid=True,
    ).select_related("gpu")
    return {(b.gpu.uuid, b.digest): b for b in found}


def cited_readings(gpu_batches: Iterable[dict[str, object]]) -> str:
    """The rows of the batches a bill line cites ([{gpu, digest, rows}]), in that order:
    from the readings table while their day is kept, from the batch's evidence after."""
    cited = [(str(b["gpu"]), str(b["digest"])) for b in gpu_batches]
    found = cited_batches(gpu_batches)
    rows = stored_rows(list(found.values()))
    return "".join(
        "".join(r + "\n" for r in rows[found[key].pk_key()]) for key in cited if key in found
    )
