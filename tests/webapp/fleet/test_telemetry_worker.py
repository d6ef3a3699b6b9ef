"""The telemetry worker on a machine without a GPU: it says NVML is unavailable in one line,
replays the configured trace instead, and stores the samples of known GPUs."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from scheduler import api as scheduler
from scheduler.telemetry.synthetic import SyntheticGpu
from webapp.fleet.models import TelemetrySample


def test_without_nvml_the_worker_replays_the_trace(fleet, settings, tmp_path, capsys):
    settings.TELEMETRY_SOURCE = "nvml"
    trace = tmp_path / "trace.csv"
    gpus = [SyntheticGpu(g.uuid, 400) for g in fleet.gpus] + [SyntheticGpu("GPU-stranger", 300)]
    scheduler.write_trace(scheduler.synthetic_trace(gpus, 1_700_000_000_000, 0.01, step_s=6), trace)
    call_command("telemetry_worker", "--trace", str(trace), "--speed", "0")
    out, err = capsys.readouterr()
    assert "NVML unavailable" in out and "replaying" in out
    assert "GPU-stranger" in err
    assert TelemetrySample.objects.count() == 4 * 7  # 4 known GPUs x 7 instants
    assert set(TelemetrySample.objects.values_list("util_mem_pct", flat=True))  # kept beside util


def test_without_nvml_or_trace_the_error_says_what_to_do(db, settings):
    settings.TELEMETRY_SOURCE = "nvml"
    with pytest.raises(CommandError, match="set --trace FILE"):
        call_command("telemetry_worker")
