"""The demo's week of history: stored once through the telemetry store (rollups included),
ending before the demo's live window."""

from __future__ import annotations

from webapp.demo.history import HISTORY_GAP_MS, MS_PER_DAY, seed_history
from webapp.fleet.models import GpuHour, TelemetrySample

NOW_MS = 1_764_547_200_000


def test_history_is_stored_once_with_its_rollups(fleet):
    stored = seed_history(NOW_MS, days=1, step_s=600)
    assert stored == 4 * 144  # four GPUs, a sample every 10 minutes for a day
    times = TelemetrySample.objects.values_list("t_ms", flat=True)
    assert max(times) < NOW_MS - HISTORY_GAP_MS
    assert min(times) == NOW_MS - HISTORY_GAP_MS - MS_PER_DAY
    assert GpuHour.objects.filter(gpu=fleet.gpus[0]).count() in (24, 25)
    assert sum(GpuHour.objects.values_list("samples", flat=True)) == stored
    assert seed_history(NOW_MS, days=1, step_s=600) == 0  # a restarted demo keeps it
