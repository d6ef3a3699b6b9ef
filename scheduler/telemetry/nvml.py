"""NVML telemetry through nvidia-ml-py (module `pynvml`).

Without a GPU or driver, `NvmlSource.open()` raises NvmlUnavailable whose message is one
line with NVML's own reason ("NVML Shared Library Not Found", "Driver Not Loaded"); the
caller falls back to its configured source (replay). Nothing here crashes the caller: every
NVML error is turned into NvmlUnavailable or skipped per GPU with a note.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from scheduler.telemetry.sample import TelemetryError, TelemetrySample

DEFAULT_INTERVAL_S = 5.0


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this machine; str() is one line naming NVML's reason."""


@dataclass
class NvmlReading:
    samples: list[TelemetrySample]
    skipped: dict[str, str] = field(default_factory=dict)  # GPU index/UUID -> NVML reason


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class NvmlSource:
    """Reads every GPU on this host. Use as a context manager or open()/close()."""

    def __init__(self) -> None:
        self._nvml: Any = None

    def open(self) -> NvmlSource:
        try:
            import pynvml
        except ImportError as exc:  # nvidia-ml-py not installed
            raise NvmlUnavailable(f"NVML unavailable: nvidia-ml-py not installed ({exc})") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML unavailable: {_one_line(exc)}") from None
        except OSError as exc:  # a broken libnvidia-ml.so that fails to load
            raise NvmlUnavailable(f"NVML unavailable: {_one_line(exc)}") from None
        self._nvml = pynvml
        return self

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            finally:
                self._nvml = None

    def __enter__(self) -> NvmlSource:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self) -> NvmlReading:
        """One sample per GPU, keyed by UUID. A GPU NVML cannot read is skipped with the
        reason (e.g. an energy counter that the board does not support)."""
        nvml = self._nvml
        if nvml is None:
            raise NvmlUnavailable("NVML source is not open")
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML unavailable: {_one_line(exc)}") from None
        reading = NvmlReading([])
        for index in range(count):
            try:
                reading.samples.append(self._sample(nvml, index))
            except (nvml.NVMLError, TelemetryError) as exc:
                reading.skipped[str(index)] = _one_line(exc)
        return reading

    @staticmethod
    def _sample(nvml: Any, index: int) -> TelemetrySample:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        rates = nvml.nvmlDeviceGetUtilizationRates(handle)
        return TelemetrySample(
            gpu=str(nvml.nvmlDeviceGetUUID(handle)),
            t_ms=time.time_ns() // 1_000_000,
            energy_mj=int(nvml.nvmlDeviceGetTotalEnergyConsumption(handle)),
            power_mw=int(nvml.nvmlDeviceGetPowerUsage(handle)),
            util_gpu_pct=int(rates.gpu),
            util_mem_pct=int(rates.memory),
            temp_c=int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
        )

    def stream(
        self, interval_s: float = DEFAULT_INTERVAL_S, sleep: Callable[[float], None] = time.sleep
    ) -> Iterator[TelemetrySample]:
        """Read every `interval_s` seconds, forever (the caller stops iterating)."""
        while True:
            yield from self.read().samples
            sleep(interval_s)


def probe() -> str:
    """One line for operators and logs: how many GPUs NVML sees, or why it cannot."""
    try:
        with NvmlSource() as source:
            reading = source.read()
    except NvmlUnavailable as exc:
        return str(exc)
    return f"NVML: {len(reading.samples)} GPU(s) readable, {len(reading.skipped)} skipped"
