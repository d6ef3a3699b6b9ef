"""Scheduler benchmark: `plan` for 10,000 GPUs and 50,000 queued jobs (wall time, CPU time,
peak memory), and the optimality gap against a MILP (HiGHS) on small instances.

    python bench/scheduler_bench.py [--runs 3] [--gap-instances 300]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.catalogue import load_catalogue  # noqa: E402
from scheduler.fleet import parse_plan_input  # noqa: E402
from scheduler.fleetgen import synthetic_plan_input  # noqa: E402
from scheduler.placement import plan  # noqa: E402
from tests.scheduler.test_quality import gaps  # noqa: E402

GPUS, JOBS, SEED = 10_000, 50_000, 1
TARGET_S = 2.0


def bench_plan(runs: int) -> dict[str, object]:
    catalogue = load_catalogue()
    raw = synthetic_plan_input(catalogue, GPUS, JOBS, seed=SEED)
    data = parse_plan_input(json.loads(json.dumps(raw)), catalogue)
    walls, cpus = [], []
    for run in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        result = plan(data, catalogue)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        print(
            f"  plan run {run + 1}/{runs}: wall {walls[-1]:.3f} s, cpu {cpus[-1]:.3f} s", flush=True
        )
    tracemalloc.start()
    plan(data, catalogue)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "placed": len(result.placements),
        "unplaced": len(result.unplaced),
        "preempted": len(result.preempted),
        "leases": len(raw["leases"]),
        "wall_s": statistics.median(walls),
        "cpu_s": statistics.median(cpus),
        "wall_runs": walls,
        "plan_peak_alloc_mib": peak / 2**20,
        "raw": raw,
    }


def bench_cli(raw: dict) -> dict[str, float]:
    """End to end in a fresh process: read JSON, validate, plan, write JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        source, target = Path(tmp) / "in.json", Path(tmp) / "out.json"
        source.write_text(json.dumps(raw))
        code = (
            "import resource, runpy, sys, time; t = time.perf_counter(); "
            f"sys.argv = ['scheduler', 'plan', '--input', {str(source)!r}, "
            f"'--output', {str(target)!r}]; "
            "from scheduler.cli import main; rc = main(); "
            "print(time.perf_counter() - t, "
            "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, rc)"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
        )
        wall, maxrss_kib, rc = done.stdout.split()
        return {
            "wall_s": float(wall),
            "maxrss_mib": int(maxrss_kib) / 1024,
            "rc": int(rc),
            "input_mib": source.stat().st_size / 2**20,
            "output_mib": target.stat().st_size / 2**20,
        }


def bench_gaps(instances: int) -> dict[str, object]:
    catalogue = load_catalogue()
    start = time.perf_counter()
    found = sorted(g for g, _ in gaps(catalogue, range(instances)))
    buckets = {"== 0 (<1e-6)": 0, "(0, 0.1%]": 0, "(0.1%, 1%]": 0, "(1%, 2%]": 0, "> 2%": 0}
    for g in found:
        key = (
            "== 0 (<1e-6)"
            if g < 1e-6
            else "(0, 0.1%]"
            if g <= 0.001
            else "(0.1%, 1%]"
            if g <= 0.01
            else "(1%, 2%]"
            if g <= 0.02
            else "> 2%"
        )
        buckets[key] += 1
    return {
        "instances": instances,
        "feasible": len(found),
        "mean": statistics.mean(found),
        "median": statistics.median(found),
        "p95": found[int(0.95 * len(found))],
        "max": found[-1],
        "buckets": buckets,
        "seconds": time.perf_counter() - start,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gap-instances", type=int, default=300)
    args = parser.parse_args()
    print(f"plan: {GPUS} GPUs, {JOBS} queued jobs (seed {SEED})", flush=True)
    p = bench_plan(args.runs)
    print(
        f"  placed {p['placed']}, unplaced {p['unplaced']}, preempted {p['preempted']} of "
        f"{p['leases']} running leases"
    )
    print(
        f"  median wall {p['wall_s']:.3f} s (target < {TARGET_S} s), cpu {p['cpu_s']:.3f} s, "
        f"peak allocation in plan (tracemalloc) {p['plan_peak_alloc_mib']:.1f} MiB"
    )
    c = bench_cli(p["raw"])
    print(
        f"CLI end to end (read {c['input_mib']:.1f} MiB JSON, validate, plan, write "
        f"{c['output_mib']:.1f} MiB): wall {c['wall_s']:.3f} s, max RSS {c['maxrss_mib']:.0f} MiB"
    )
    print(
        f"optimality gap vs MILP (HiGHS) on {args.gap_instances} seeded small instances:",
        flush=True,
    )
    g = bench_gaps(args.gap_instances)
    print(
        f"  {g['feasible']} feasible (every job placeable): mean {g['mean']:.4%}, median "
        f"{g['median']:.4%}, p95 {g['p95']:.4%}, max {g['max']:.4%} ({g['seconds']:.0f} s)"
    )
    for bucket, count in g["buckets"].items():
        print(f"    gap {bucket}: {count}")
    print(
        f"python {platform.python_version()}, maxrss of this process "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )
    return 0 if p["wall_s"] < TARGET_S and g["max"] <= 0.02 else 1


if __name__ == "__main__":
    sys.exit(main())
