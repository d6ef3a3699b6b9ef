"""Energy-counter readings as the ledger's telemetry digest covers them, and the energy they
measure. One definition, used by the scheduler when it settles and by `audit-bill` when a
tenant re-derives a line from the readings alone.

A reading is the CSV row `t_ms,gpu,energy_mj,power_mw,util_gpu_pct,util_mem_pct,temp_c`. A
GPU's digest is the SHA-256 of its rows in time order, each ending in "\\n"; an interval's
digest is the SHA-256 of the lines `{gpu}:{digest}\\n` in GPU order. Measured energy is the
sum of the counter's increases between consecutive readings of each GPU; a counter that goes
down (a driver restart) starts again and the energy across the restart is not counted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

FIELDS = ("t_ms", "gpu", "energy_mj", "power_mw", "util_gpu_pct", "util_mem_pct", "temp_c")
MAX_READINGS_CHARS = 64 * 1024 * 1024
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


def _by_gpu(readings: Iterable[Reading]) -> dict[str, list[Reading]]:
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
    """The interval's digest from each GPU's."""
    lines = "".join(f"{gpu}:{per_gpu[gpu]}\n" for gpu in sorted(per_gpu))
    return hashlib.sha256(lines.encode()).hexdigest()


def interval_digest(readings: Iterable[Reading]) -> str:
    groups = _by_gpu(readings)
    return combine({gpu: gpu_digest(r.row for r in rows) for gpu, rows in groups.items()})


def energy_mj(readings: Iterable[Reading]) -> int:
    """Measured energy over all GPUs: the counters' increases, restarts not counted."""
    total = 0
    for gpu, rows in _by_gpu(readings).items():
        for before, after in pairwise(rows):
            if after.t_ms == before.t_ms and after.energy_mj != before.energy_mj:
                raise ValueError(f"GPU {gpu}: two readings at t_ms {after.t_ms} disagree")
            total += max(0, after.energy_mj - before.energy_mj)
    return total
