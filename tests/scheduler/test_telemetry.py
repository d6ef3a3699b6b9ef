from __future__ import annotations

import io
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.telemetry.nvml import NvmlSource, NvmlUnavailable, probe
from scheduler.telemetry.replay import (
    HEADER,
    ReplaySource,
    load_trace,
    read_trace,
    write_trace,
)
from scheduler.telemetry.sample import TelemetryError, TelemetrySample
from scheduler.telemetry.synthetic import (
    Q2_IDLE_BY_HOUR,
    SyntheticGpu,
    occupancy_trace,
    synthetic_fleet,
    synthetic_trace,
)


def nvml_present() -> bool:
    try:
        NvmlSource().open().close()
    except NvmlUnavailable:
        return False
    return True


@pytest.mark.skipif(nvml_present(), reason="this test is for machines without NVML")
def test_without_a_gpu_nvml_says_so_in_one_line():
    with pytest.raises(NvmlUnavailable) as info:
        NvmlSource().open()
    message = str(info.value)
    assert message.startswith("NVML unavailable: ") and "\n" not in message
    assert "NVML Shared Library Not Found" in message or "Driver Not Loaded" in message
    assert probe() == message


def test_nvml_probe_never_crashes_a_fresh_process():
    done = subprocess.run(
        [sys.executable, "-c", "from scheduler.telemetry.nvml import probe; print(probe())"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0 and done.stdout.count("\n") == 1
    assert done.stdout.startswith(("NVML unavailable: ", "NVML: "))


@pytest.mark.skipif(not nvml_present(), reason="needs an NVIDIA GPU and driver")
def test_nvml_reads_every_gpu_with_energy_and_bandwidth_utilisation():
    with NvmlSource() as source:
        first = source.read()
        second = source.read()
    assert first.samples, first.skipped
    for a, b in zip(first.samples, second.samples, strict=True):
        assert a.gpu == b.gpu and a.gpu.startswith("GPU-")
        assert b.energy_mj >= a.energy_mj and 0 <= a.util_mem_pct <= 100


def sample(t: int, gpu: str = "GPU-1", energy: int = 0) -> TelemetrySample:
    return TelemetrySample(gpu, t, energy, 250_000, 80, 30, 60)


def test_trace_round_trips(tmp_path):
    samples = [sample(0), sample(1000, energy=250_000), sample(1000, "GPU-2")]
    path = tmp_path / "trace.csv"
    assert write_trace(samples, path) == 3
    assert load_trace(path) == samples
    assert path.read_text().splitlines()[0] == HEADER


def test_replay_keeps_pace_at_the_chosen_speed(tmp_path):
    path = tmp_path / "trace.csv"
    write_trace([sample(0), sample(60_000), sample(120_000)], path)
    slept: list[float] = []
    out = list(ReplaySource(path, speed=60, shift_ms=5, sleep=slept.append))
    assert slept == [1.0, 1.0]  # a minute of trace per second at 60x
    assert [s.t_ms for s in out] == [5, 60_005, 120_005]
    assert list(ReplaySource(path, speed=0, sleep=slept.append)) and len(slept) == 2


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"t,gpu\n", "trace line 1: expected header"),
        (HEADER.encode() + b"\n1,GPU-1,5,5,5,5\n", "trace line 2: expected 7 fields, got 6"),
        (HEADER.encode() + b"\n1,GPU-1,x,5,5,5,5\n", "trace line 2, field 'energy_mj': not an"),
        (HEADER.encode() + b"\n1,GPU-1,5,5,101,5,5\n", "trace line 2: util_gpu_pct must be"),
        (HEADER.encode() + b"\n1,GPU-1,-5,5,5,5,5\n", "trace line 2: energy_mj must be"),
        (HEADER.encode() + b"\n9,G,5,5,5,5,5\n8,G,5,5,5,5,5\n", "trace line 3: t_ms 8 goes back"),
        (HEADER.encode() + b"\n" + b"1" * 300 + b"\n", "trace line 2: longer than 256 bytes"),
        (HEADER.encode() + b"\n1,GPU-\xff,5,5,5,5,5\n", "trace line 2: non-ASCII byte at offset 6"),
    ],
)
def test_bad_traces_name_the_line_and_field(body, message):
    with pytest.raises(TelemetryError) as info:
        list(read_trace(io.BytesIO(body)))
    assert message in str(info.value)


def test_row_limit_is_enforced():
    body = HEADER.encode() + b"\n" + b"1,G,5,5,5,5,5\n" * 5
    with pytest.raises(TelemetryError, match="more than 3 rows"):
        list(read_trace(io.BytesIO(body), max_rows=3))


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=600))
def test_trace_parser_fuzz_raises_only_telemetry_errors(noise):
    for body in (noise, HEADER.encode() + b"\n" + noise):
        try:
            for s in read_trace(io.BytesIO(body), max_rows=50):
                assert 0 <= s.util_gpu_pct <= 100 and s.energy_mj >= 0
        except TelemetryError as exc:
            assert str(exc).startswith("trace ")


row = st.tuples(
    st.integers(-5, 2**54),
    st.text("GPU-abc,", min_size=0, max_size=6),
    st.integers(-5, 2**64),
    st.integers(-1, 6_000_000),
    st.integers(-1, 101),
    st.integers(-1, 101),
    st.integers(-50, 160),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(row, max_size=6))
def test_near_valid_rows_are_accepted_or_rejected_with_a_line(rows):
    body = HEADER + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows)
    try:
        list(read_trace(io.BytesIO(body.encode())))
    except TelemetryError as exc:
        assert str(exc).startswith("trace line ")


def test_q2_profile_matches_the_seed_anchors():
    assert Q2_IDLE_BY_HOUR[2] == Q2_IDLE_BY_HOUR[4] == 0.623
    assert Q2_IDLE_BY_HOUR[10] == Q2_IDLE_BY_HOUR[12] == 0.191
    assert abs(sum(Q2_IDLE_BY_HOUR) / 24 - 0.387) < 1e-9


def test_synthetic_trace_follows_the_profile_and_keeps_bandwidth_beside_compute():
    fleet = synthetic_fleet(200, seed=1)
    samples = list(synthetic_trace(fleet, 0, hours=24, step_s=600, seed=1))
    night = [s for s in samples if 2 <= (s.t_ms // 3_600_000) % 24 < 5]
    noon = [s for s in samples if 10 <= (s.t_ms // 3_600_000) % 24 < 13]
    idle = lambda group: sum(s.util_gpu_pct < 5 for s in group) / len(group)  # noqa: E731
    assert abs(idle(night) - 0.623) < 0.03 and abs(idle(noon) - 0.191) < 0.03
    busy = [s for s in samples if s.util_gpu_pct >= 90]
    assert any(s.util_mem_pct < 30 for s in busy)  # high compute util, low bandwidth
    by_gpu: dict[str, list[TelemetrySample]] = {}
    for s in samples:
        by_gpu.setdefault(s.gpu, []).append(s)
    assert all(len(v) == 24 * 6 + 1 for v in by_gpu.values())


def test_synthetic_trace_is_deterministic():
    fleet = synthetic_fleet(5, seed=2)
    assert list(synthetic_trace(fleet, 0, 1, seed=3)) == list(synthetic_trace(fleet, 0, 1, seed=3))


@pytest.mark.skipif(nvml_present(), reason="this test is for machines without NVML")
def test_without_nvml_the_configured_trace_is_replayed_and_the_note_says_why(tmp_path):
    from scheduler.telemetry.source import open_telemetry

    path = tmp_path / "trace.csv"
    write_trace([sample(0), sample(1000)], path)
    chosen = open_telemetry("nvml", trace=path, speed=0)
    assert chosen.kind == "replay" and "\n" not in chosen.note
    assert chosen.note.startswith("NVML unavailable: ") and f"replaying {path}" in chosen.note
    assert [s.t_ms for s in chosen.samples] == [0, 1000]
    with pytest.raises(TelemetryError, match="no trace file is configured"):
        open_telemetry("nvml")
    with pytest.raises(TelemetryError, match="unknown telemetry source 'dcgm'"):
        open_telemetry("dcgm")


def test_occupancy_trace_works_only_the_leased_gpus_and_continues_its_counters():
    fleet = [SyntheticGpu("GPU-a", 700), SyntheticGpu("GPU-b", 300)]
    rng, energy = random.Random(1), {}
    first = list(occupancy_trace(fleet, {"GPU-a"}, 1_000_000, 10, 2, rng, energy))
    assert [s.t_ms for s in first[::2]] == [1_002_000, 1_004_000, 1_006_000, 1_008_000, 1_010_000]
    idle = [s for s in first if s.gpu == "GPU-b"]
    assert {(s.util_gpu_pct, s.util_mem_pct, s.power_mw) for s in idle} == {(0, 0, 36_000)}
    busy = [s for s in first if s.gpu == "GPU-a"]
    assert all(s.util_gpu_pct >= 55 and s.power_mw > 300_000 for s in busy)
    # the next piece (now GPU-b is leased) continues each counter where the first stopped
    second = list(occupancy_trace(fleet, {"GPU-b"}, 1_010_000, 4, 2, rng, energy))
    b = [s for s in second if s.gpu == "GPU-b"]
    assert b[0].energy_mj == idle[-1].energy_mj + b[0].power_mw * 2
    assert b[0].util_gpu_pct >= 55
