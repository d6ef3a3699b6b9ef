"""Trace files: CSV with the header `t_ms,gpu,energy_mj,power_mw,util_gpu_pct,util_mem_pct,
temp_c`, rows in non-decreasing time. Traces are untrusted input: lines, rows and fields
are bounded, and every error names the line, the field and the value."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from scheduler.telemetry.sample import CSV_FIELDS, TelemetryError, TelemetrySample

MAX_LINE_BYTES = 256  # a valid row is < 160 bytes
MAX_ROWS = 100_000_000
MAX_INT_DIGITS = 20
HEADER = ",".join(CSV_FIELDS)


def _field_int(text: str, name: str, line: int) -> int:
    body = text[1:] if text.startswith("-") else text
    if not body.isdigit() or not body.isascii() or len(body) > MAX_INT_DIGITS:
        raise TelemetryError(f"trace line {line}, field {name!r}: not an integer: {text[:24]!r}")
    return int(text)


def parse_row(raw: bytes, line: int) -> TelemetrySample:
    try:
        text = raw.decode("ascii").rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise TelemetryError(f"trace line {line}: non-ASCII byte at offset {exc.start}") from None
    parts = text.split(",")
    if len(parts) != len(CSV_FIELDS):
        raise TelemetryError(
            f"trace line {line}: expected {len(CSV_FIELDS)} fields, got {len(parts)}"
        )
    values = dict(zip(CSV_FIELDS, parts, strict=True))
    try:
        return TelemetrySample(
            gpu=values["gpu"],
            **{name: _field_int(values[name], name, line) for name in CSV_FIELDS if name != "gpu"},
        )
    except TelemetryError as exc:
        message = str(exc)
        if message.startswith("trace line"):
            raise
        raise TelemetryError(f"trace line {line}: {message}") from None


def read_trace(handle: BinaryIO, max_rows: int = MAX_ROWS) -> Iterator[TelemetrySample]:
    """Yield samples from a trace; raises TelemetryError at the first bad line."""
    header = handle.readline(MAX_LINE_BYTES + 1)
    if header.rstrip(b"\r\n") != HEADER.encode():
        raise TelemetryError(f"trace line 1: expected header {HEADER!r}, got {header[:80]!r}")
    last_t = -1
    for line in range(2, max_rows + 3):
        raw = handle.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES:
            raise TelemetryError(f"trace line {line}: longer than {MAX_LINE_BYTES} bytes")
        if not raw.strip():
            continue
        sample = parse_row(raw, line)
        if sample.t_ms < last_t:
            raise TelemetryError(
                f"trace line {line}: t_ms {sample.t_ms} goes back in time (previous {last_t})"
            )
        last_t = sample.t_ms
        yield sample
    raise TelemetryError(f"trace has more than {max_rows} rows")


def load_trace(path: Path | str, max_rows: int = MAX_ROWS) -> list[TelemetrySample]:
    try:
        with open(path, "rb") as handle:
            return list(read_trace(handle, max_rows))
    except OSError as exc:
        raise TelemetryError(f"cannot read trace {path}: {exc.strerror}") from None


def write_trace(samples: Iterable[TelemetrySample], path: Path | str) -> int:
    """Write samples as a trace (atomically: a crash leaves no half-written file)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    rows = 0
    try:
        with os.fdopen(fd, "w", encoding="ascii", newline="\n") as handle:
            handle.write(HEADER + "\n")
            for sample in samples:
                handle.write(",".join(str(v) for v in sample.canonical()) + "\n")
                rows += 1
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return rows


class ReplaySource:
    """Replays a trace at `speed` x real time (speed 60: an hour of trace per minute;
    speed 0: as fast as possible). `shift_ms` moves every timestamp (e.g. to "now")."""

    def __init__(
        self,
        path: Path | str,
        speed: float = 1.0,
        shift_ms: int = 0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if speed < 0:
            raise TelemetryError(f"replay speed must be >= 0, got {speed}")
        self.path, self.speed, self.shift_ms, self._sleep = Path(path), speed, shift_ms, sleep

    def __iter__(self) -> Iterator[TelemetrySample]:
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 - closed in finally, generator
        except OSError as exc:
            raise TelemetryError(f"cannot read trace {self.path}: {exc.strerror}") from None
        try:
            previous: int | None = None
            for sample in read_trace(handle):
                if self.speed and previous is not None and sample.t_ms > previous:
                    self._sleep((sample.t_ms - previous) / 1000 / self.speed)
                previous = sample.t_ms
                yield _shifted(sample, self.shift_ms) if self.shift_ms else sample
        finally:
            handle.close()


def _shifted(sample: TelemetrySample, shift_ms: int) -> TelemetrySample:
    values = dict(zip(CSV_FIELDS, sample.canonical(), strict=True))
    values["t_ms"] = sample.t_ms + shift_ms
    return TelemetrySample(**values)  # type: ignore[arg-type]
