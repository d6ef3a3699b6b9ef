"""One telemetry sample per GPU per instant, in integer units (ms, mJ, mW, %, °C), so that
settlement arithmetic and digests never touch floating point."""

from __future__ import annotations

from dataclasses import dataclass

MAX_UUID_CHARS = 96
MAX_ENERGY_MJ = 1 << 63  # NVML's counter is an unsigned long long
MAX_POWER_MW = 5_000_000  # 5 kW: above this a reading is a broken sensor
MIN_TEMP_C, MAX_TEMP_C = -40, 150
CSV_FIELDS = ("t_ms", "gpu", "energy_mj", "power_mw", "util_gpu_pct", "util_mem_pct", "temp_c")


class TelemetryError(ValueError):
    """A sample or trace is invalid; the message names the field (and line) and value."""


@dataclass(frozen=True, slots=True)
class TelemetrySample:
    gpu: str  # NVML UUID, e.g. "GPU-5d7c..."
    t_ms: int  # Unix time, milliseconds
    energy_mj: int  # total-energy counter since driver load (nvmlDeviceGetTotalEnergyConsumption)
    power_mw: int
    util_gpu_pct: int  # share of time a kernel ran: NOT throughput
    util_mem_pct: int  # share of time device memory was read or written (bandwidth)
    temp_c: int

    def __post_init__(self) -> None:
        check_sample(self)

    def canonical(self) -> list[object]:
        """The fields in CSV_FIELDS order: what settlement digests hash."""
        return [getattr(self, name) for name in CSV_FIELDS]


def _int_in(name: str, value: object, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise TelemetryError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")


def check_sample(s: TelemetrySample) -> None:
    if not isinstance(s.gpu, str) or not 0 < len(s.gpu) <= MAX_UUID_CHARS or "," in s.gpu:
        raise TelemetryError(f"gpu must be 1-{MAX_UUID_CHARS} characters, no comma: {s.gpu!r}")
    _int_in("t_ms", s.t_ms, 0, 1 << 53)
    _int_in("energy_mj", s.energy_mj, 0, MAX_ENERGY_MJ)
    _int_in("power_mw", s.power_mw, 0, MAX_POWER_MW)
    _int_in("util_gpu_pct", s.util_gpu_pct, 0, 100)
    _int_in("util_mem_pct", s.util_mem_pct, 0, 100)
    _int_in("temp_c", s.temp_c, MIN_TEMP_C, MAX_TEMP_C)
