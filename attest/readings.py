"""Energy-counter readings as the ledger's telemetry digest covers them, and the energy they
measure. One definition, used by the scheduler when it settles and by `audit-bill` when a
tenant re-derives a line from the readings alone.

A reading is the CSV row `t_ms,gpu,energy_mj,power_mw,util_gpu_pct,util_mem_pct,temp_c`. A
GPU's digest is the SHA-256 of its rows in time order, each ending in "\\n"; a node's
telemetry digest (what its quote binds) is the SHA-256 of the lines `{gpu}:{digest}\\n` in
GPU order. Measured energy is the
sum of the counter's increases between consecutive readings of each GPU; a counter that goes
down (a driver restart) starts again and the energy across the restart is not counted.

Attested telemetry (docs/billing.md): a GPU's *batch* is its readings between two quotes of
its node, with the digest `gpu_digest`; a quote binds the node's batches through its
qualifying data `qualifying_data(nonce, {gpu: batch digest})`; a bill line names its batches,
and its digest is `evidence_digest` of them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

TELEMETRY_DOMAIN = b"wattlease/telemetry/v1\x00"  # separates these hashes from any other use
FIELDS = ("t_ms", "gpu", "energy_mj", "power_mw", "util_gpu_pct", "util_mem_pct", "temp_c")
MAX_READINGS_CHARS = 64 * 1024 * 1024
# The readings one quote binds: the node agent sends at most this much with a quote (the rest
# waits for the next), and they travel whole in the ledger's RecordAttestation argument (64 KiB
# with the quote), where every endorser derives their digests and counters from them.
MAX_QUOTED_READINGS_CHARS = 48 * 1024
MAX_GPU_CHARS = 128
MAX_COUNTER = 10**18


@dataclass(frozen=True)
class Reading:
    t_ms: int
    gpu: str
    energy_mj: int
    row: str  # the canonical CSV row, without its line end


def row_text(fields: Iterable[object]) -> str:
    return ",".join(str(v) for v in fields)


def parse_rows(text: str) -> list[Reading]:
    """Readings from CSV text (untrusted): ValueError naming the line on anything else."""
    if len(text) > MAX_READINGS_CHARS:
        raise ValueError(f"readings are {len(text)} characters, limit {MAX_READINGS_CHARS}")
    out = []
    for number, row in enumerate(text.splitlines(), start=1):
        parts = row.split(",")
        if len(parts) != len(FIELDS):
            raise ValueError(f"line {number}: expected {len(FIELDS)} fields, got {len(parts)}")
        gpu = parts[1]
        if not 0 < len(gpu) <= MAX_GPU_CHARS or not gpu.isprintable():
            raise ValueError(f"line {number}: gpu must be 1-{MAX_GPU_CHARS} printable characters")
        numbers = [parts[0], *parts[2:]]
        if not all(p.isdigit() and p.isascii() and str(int(p)) == p for p in numbers):
            raise ValueError(f"line {number}: {row_text(numbers)[:60]!r} are not all integers")
        if int(parts[2]) > MAX_COUNTER or int(parts[0]) > MAX_COUNTER:
            raise ValueError(f"line {number}: counter or time above {MAX_COUNTER}")
        out.append(Reading(int(parts[0]), gpu, int(parts[2]), row))
    return out


def by_gpu(readings: Iterable[Reading]) -> dict[str, list[Reading]]:
    groups: dict[str, list[Reading]] = {}
    for reading in readings:
        groups.setdefault(reading.gpu, []).append(reading)
    return {gpu: sorted(rows, key=lambda r: r.t_ms) for gpu, rows in sorted(groups.items())}


def gpu_digest(rows: Iterable[str]) -> str:
    """SHA-256 of one GPU's canonical rows in time order."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update((row + "\n").encode("ascii"))
    return digest.hexdigest()


def combine(per_gpu: dict[str, str]) -> str:
    """A node's telemetry digest from each GPU's batch digest."""
    lines = "".join(f"{gpu}:{per_gpu[gpu]}\n" for gpu in sorted(per_gpu))
    return hashlib.sha256(lines.encode()).hexdigest()


def gpu_digests(readings: Iterable[Reading]) -> dict[str, str]:
    """Each GPU's digest over its readings: a node's batches, as its quote binds them."""
    return {gpu: gpu_digest(r.row for r in rows) for gpu, rows in by_gpu(readings).items()}


def energy_mj(readings: Iterable[Reading]) -> int:
    """Measured energy over all GPUs: the counters' increases, restarts not counted."""
    total = 0
    for gpu, rows in by_gpu(readings).items():
        for before, after in pairwise(rows):
            if after.t_ms == before.t_ms and after.energy_mj != before.energy_mj:
                raise ValueError(f"GPU {gpu}: two readings at t_ms {after.t_ms} disagree")
            total += max(0, after.energy_mj - before.energy_mj)
    return total


def qualifying_data(nonce: bytes, telemetry: dict[str, str] | None) -> bytes:
    """What a quote's extraData must hold: the plain nonce without readings, else
    SHA-256(domain || nonce || the node's telemetry digest), 32 bytes (TPM2B_DATA holds 64)."""
    if not telemetry:
        return nonce
    node_digest = bytes.fromhex(combine(telemetry))
    return hashlib.sha256(TELEMETRY_DOMAIN + nonce + node_digest).digest()


@dataclass(frozen=True)
class Batch:
    """One GPU's readings between two quotes of its node, as a bill line cites them."""

    gpu: str
    digest: str
    rows: int

    def as_dict(self) -> dict[str, object]:
        return {"gpu": self.gpu, "digest": self.digest, "rows": self.rows}


def evidence_digest(batches: Iterable[Batch]) -> str:
    """A line's telemetry digest: SHA-256 of `{gpu}:{digest}:{rows}\\n` per batch, in order."""
    lines = "".join(f"{b.gpu}:{b.digest}:{b.rows}\n" for b in batches)
    return hashlib.sha256(lines.encode()).hexdigest()


def split_batches(readings: Iterable[Reading], batches: Iterable[Batch]) -> list[str]:
    """Re-derive the batches from the readings: each GPU's rows in time order, cut into its
    batches by their row counts and re-hashed. Returns what does not match (empty: all do)."""
    groups = by_gpu(readings)
    taken: dict[str, int] = {}
    problems = []
    for batch in batches:
        rows = groups.get(batch.gpu, [])
        first = taken.get(batch.gpu, 0)
        chunk = rows[first : first + batch.rows]
        taken[batch.gpu] = first + batch.rows
        digest = gpu_digest(r.row for r in chunk)
        if len(chunk) != batch.rows or digest != batch.digest:
            problems.append(
                f"GPU {batch.gpu} batch {batch.digest[:16]}...: the readings hash to "
                f"{digest[:16]}... over {len(chunk)} rows, the ledger has {batch.rows} rows"
            )
    for gpu, rows in groups.items():
        if len(rows) > taken.get(gpu, 0):
            problems.append(f"GPU {gpu}: {len(rows) - taken.get(gpu, 0)} readings in no batch")
    return problems


def within(readings: Iterable[Reading], start_ms: int, end_ms: int) -> list[Reading]:
    """The readings a line measures: those inside [start_ms, end_ms]."""
    return [r for r in readings if start_ms <= r.t_ms <= end_ms]
