"""Time ranges of the operator's time series: which window, at which resolution, read
from raw samples (short windows) or the hourly rollups (long ones)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ledger.units import MS_PER_DAY, MS_PER_HOUR, MS_PER_MINUTE


@dataclass(frozen=True)
class Range:
    name: str
    span_ms: int
    bucket_ms: int

    @property
    def from_rollups(self) -> bool:
        """Hour buckets and longer come from GpuHour, never from raw samples."""
        return self.bucket_ms >= MS_PER_HOUR

    def window(self, now_ms: int | None = None) -> tuple[int, int]:
        now_ms = now_ms or time.time_ns() // 1_000_000
        return now_ms - self.span_ms, now_ms


RANGES = {
    r.name: r
    for r in (
        Range("1h", MS_PER_HOUR, MS_PER_MINUTE),
        Range("6h", 6 * MS_PER_HOUR, 5 * MS_PER_MINUTE),
        Range("24h", MS_PER_DAY, MS_PER_HOUR),
        Range("7d", 7 * MS_PER_DAY, MS_PER_HOUR),
        Range("28d", 28 * MS_PER_DAY, 6 * MS_PER_HOUR),
    )
}
DEFAULT_RANGE = "24h"


class BadRange(ValueError):
    """A `range` the dashboards do not offer; the message lists those they do."""


def parse_range(value: str | None) -> Range:
    name = value or DEFAULT_RANGE
    if name not in RANGES:
        raise BadRange(f"range={name!r} is not one of {', '.join(RANGES)}")
    return RANGES[name]


def bucket_of(t_ms: int, bucket_ms: int) -> int:
    return t_ms - t_ms % bucket_ms
