"""Telemetry sources: NVML on real GPUs, trace replay and a synthetic fleet elsewhere.
Every sample carries memory-bandwidth utilisation beside compute utilisation: utilisation
alone is not throughput (the seed's first trap)."""

from __future__ import annotations

from scheduler.telemetry.sample import TelemetryError, TelemetrySample

__all__ = ["TelemetryError", "TelemetrySample"]
