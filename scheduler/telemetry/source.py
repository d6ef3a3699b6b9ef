"""Choosing the telemetry source: NVML where a GPU and driver exist, else the configured
trace replay. The choice is explained in one line, for the log and the dashboard."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from scheduler.telemetry.nvml import DEFAULT_INTERVAL_S, NvmlSource, NvmlUnavailable
from scheduler.telemetry.replay import ReplaySource
from scheduler.telemetry.sample import TelemetryError, TelemetrySample


@dataclass
class ChosenSource:
    kind: str  # "nvml" | "replay"
    note: str  # one line: what was chosen and, after a fallback, why
    samples: Iterator[TelemetrySample]


def open_telemetry(
    prefer: str = "nvml",
    trace: Path | str | None = None,
    speed: float = 1.0,
    interval_s: float = DEFAULT_INTERVAL_S,
) -> ChosenSource:
    """NVML if `prefer` is "nvml" and it works; otherwise replay `trace`. Raises
    TelemetryError (one line) only when neither is possible."""
    reason = ""
    if prefer == "nvml":
        try:
            source = NvmlSource().open()
        except NvmlUnavailable as exc:
            reason = str(exc)
        else:
            return ChosenSource("nvml", "telemetry: NVML", source.stream(interval_s))
    elif prefer != "replay":
        raise TelemetryError(f"unknown telemetry source {prefer!r} (nvml, replay)")
    if trace is None:
        raise TelemetryError(f"{reason or 'replay chosen'}; and no trace file is configured")
    replay = ReplaySource(trace, speed=speed)
    note = f"telemetry: replaying {trace} at {speed}x"
    return ChosenSource("replay", f"{reason}; {note}" if reason else note, iter(replay))
