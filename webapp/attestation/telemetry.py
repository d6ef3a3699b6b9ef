"""The readings a node's agent sends with its quote (docs/billing.md, "Attested telemetry"):
checked, kept as one batch per GPU beside the attestation whose quote bound their digests,
and stored as samples for the dashboards. A bill line cites only batches of valid quotes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db.models import Max

from attest import readings
from scheduler.settlement import AttestedBatch
from scheduler.telemetry.replay import parse_row
from scheduler.telemetry.sample import TelemetrySample
from webapp.attestation.models import Attestation, TelemetryBatch
from webapp.fleet.models import GPU, Node
from webapp.fleet.telemetry import record_samples

# under the request body limit (1 MiB): ~15,000 readings, 8 GPUs at 1 Hz for half an hour
MAX_TELEMETRY_CHARS = 960 * 1024


class TelemetryRefused(ValueError):
    """The readings cannot be bound into a quote; the message names the line or GPU."""


def parse(node: Node, text: str) -> dict[str, list[readings.Reading]]:
    """Each GPU's readings in time order, or TelemetryRefused naming what is wrong."""
    if len(text) > MAX_TELEMETRY_CHARS:
        raise TelemetryRefused(f"telemetry: {len(text)} characters, limit {MAX_TELEMETRY_CHARS}")
    try:
        groups = readings.by_gpu(readings.parse_rows(text))
        for rows in groups.values():
            readings.energy_mj(rows)  # two readings at one instant must agree
            for number, row in enumerate(rows, start=1):
                parse_row(row.row.encode(), number)  # each value within the sample's range
    except ValueError as exc:
        raise TelemetryRefused(f"telemetry: {exc}") from None
    foreign = sorted(set(groups) - set(node.gpus.values_list("uuid", flat=True)))
    if foreign:
        raise TelemetryRefused(f"telemetry: {foreign} are not GPUs of {node.name}")
    return groups


def digests(groups: dict[str, list[readings.Reading]]) -> dict[str, str]:
    """{gpu: batch digest}, what the quote binds (attest.readings)."""
    return readings.gpu_digests(r for rows in groups.values() for r in rows)


def keep(attestation: Attestation, groups: dict[str, list[readings.Reading]]) -> None:
    """Store the batches beside their attestation, and their readings as samples."""
    if not groups:
        return
    by_uuid = {g.uuid: g for g in GPU.objects.filter(uuid__in=groups)}
    TelemetryBatch.objects.bulk_create(
        TelemetryBatch(
            attestation=attestation,
            gpu=by_uuid[gpu],
            digest=digest,
            first_ms=groups[gpu][0].t_ms,
            last_ms=groups[gpu][-1].t_ms,
            rows=len(groups[gpu]),
            readings="".join(r.row + "\n" for r in groups[gpu]),
        )
        for gpu, digest in digests(groups).items()
    )
    record_samples(samples(r for rows in groups.values() for r in rows))


def samples(rows: Iterable[readings.Reading]) -> list[TelemetrySample]:
    return [parse_row(r.row.encode(), n) for n, r in enumerate(rows, start=1)]


def attested_batches(gpus: Sequence[GPU], start_ms: int, end_ms: int) -> list[AttestedBatch]:
    """The batches of `gpus` with readings in [start_ms, end_ms] that a valid quote bound:
    the only readings a bill line measures (the relay sends the line only once those quotes
    are on the ledger, reactions.wait_for_attested_batches)."""
    stored = TelemetryBatch.objects.filter(
        gpu__in=gpus, first_ms__lte=end_ms, last_ms__gte=start_ms, attestation__valid=True
    ).select_related("gpu")
    return [
        AttestedBatch(b.gpu.uuid, b.digest, tuple(samples(readings.parse_rows(b.readings))))
        for b in stored
    ]


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


def cited_readings(gpu_batches: Iterable[dict[str, object]]) -> str:
    """The rows of the batches a bill line cites ([{gpu, digest, rows}]), in that order."""
    cited = [(str(b["gpu"]), str(b["digest"])) for b in gpu_batches]
    stored = {
        (uuid, digest): rows
        for uuid, digest, rows in TelemetryBatch.objects.filter(
            gpu__uuid__in={gpu for gpu, _ in cited},
            digest__in={digest for _, digest in cited},
            attestation__valid=True,
        ).values_list("gpu__uuid", "digest", "readings")
    }
    return "".join(stored.get(key, "") for key in cited)
