"""The GPU host's counter log: `python -m scheduler counters` appends the readings of a
telemetry source as whole canonical rows, which the node agent reads back batch by batch
and binds into its quotes (docs/billing.md, "Attested telemetry")."""

from __future__ import annotations

from attest import readings
from attest.agent.http import FileCounters
from scheduler.cli import main
from scheduler.telemetry.replay import write_trace
from scheduler.telemetry.sample import TelemetrySample


def _trace(tmp_path, start: int):
    samples = [
        TelemetrySample(gpu, t, t * 300, 300_000, 90, 50, 60)
        for t in range(start, start + 5_000, 1_000)
        for gpu in ("GPU-a", "GPU-b")
    ]
    path = tmp_path / f"trace-{start}.csv"
    write_trace(samples, path)
    return samples, path


def test_the_counter_log_appends_whole_rows_the_agent_reads_once(tmp_path):
    log = tmp_path / "counters.csv"
    agent_reads = FileCounters(log)
    assert agent_reads() == ""  # no log yet: nothing to bind
    first, trace = _trace(tmp_path, 1_000)
    argv = ["counters", "--out", str(log), "--source", "replay", "--speed", "0"]
    assert main([*argv, "--trace", str(trace)]) == 0
    batch = agent_reads()
    assert batch == "".join(readings.row_text(s.canonical()) + "\n" for s in first)
    assert readings.gpu_digests(readings.parse_rows(batch)).keys() == {"GPU-a", "GPU-b"}
    assert agent_reads() == ""  # read once: the next quote binds only newer rows
    second, trace = _trace(tmp_path, 10_000)
    assert main([*argv, "--trace", str(trace), "--max-samples", "3"]) == 0
    assert [r.t_ms for r in readings.parse_rows(agent_reads())] == [s.t_ms for s in second[:3]]


def test_no_source_is_one_line_and_exit_1(tmp_path, capsys):
    argv = ["counters", "--out", str(tmp_path / "c.csv"), "--source", "replay"]
    assert main(argv) == 1
    assert "--trace" in capsys.readouterr().err
