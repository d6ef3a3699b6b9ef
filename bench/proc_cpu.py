"""CPU time of named processes from /proc, so a bench can say which one limits the whole path.

A `CpuMeter` reads each process's user+system time (all its threads) and the machine's busy
time at the start and end of a measured run; the difference, per wall second, is how many
cores each used. The machine's figure minus ours is everything else running (other users of
a shared machine). Linux only: /proc/<pid>/stat fields 14-15 and /proc/stat's `cpu` line.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# utime and stime are fields 14 and 15 of /proc/<pid>/stat; after the pid and the
# parenthesised name (fields 1-2) are cut off, they sit at these 0-based indexes.
STAT_UTIME_INDEX, STAT_STIME_INDEX = 11, 12
PROC_STAT_IDLE_FIELDS = (3, 4)  # idle and iowait in /proc/stat's cpu line, after the label
OTHERS = "(rest of machine)"


def process_cpu_s(pid: int) -> float:
    """User+system CPU seconds of `pid` so far (0.0 if it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces
    return (int(fields[STAT_UTIME_INDEX]) + int(fields[STAT_STIME_INDEX])) / CLOCK_TICKS_PER_S


def machine_busy_s() -> float:
    """CPU seconds all cores have spent not idle since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = sum(values[i] for i in PROC_STAT_IDLE_FIELDS)
    return (sum(values[:8]) - idle) / CLOCK_TICKS_PER_S  # guest time is already in user


def children_cpu_s() -> float:
    """CPU seconds of this process's waited-for children (a client run as a subprocess)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class CpuMeter:
    """CPU seconds of each named pid between `start()` and `stop()`, plus `extra` readers
    (for clients that are this process or its children)."""

    pids: dict[str, int]
    extra: dict[str, Callable[[], float]] = field(default_factory=dict)
    _start: dict[str, float] = field(default_factory=dict)
    _t0: float = 0.0

    def _read(self) -> dict[str, float]:
        out = {name: process_cpu_s(pid) for name, pid in self.pids.items()}
        out.update({name: reader() for name, reader in self.extra.items()})
        out["(machine)"] = machine_busy_s()
        return out

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._start = self._read()

    def stop(self) -> dict[str, object]:
        """Cores used by each process over the run, the others' share, and the top one."""
        wall = time.monotonic() - self._t0
        end = self._read()
        used = {k: max(0.0, end[k] - self._start[k]) for k in end}
        machine = used.pop("(machine)")
        ours = sum(used.values())
        used[OTHERS] = max(0.0, machine - ours)
        cores = {k: round(v / wall, 3) for k, v in used.items()} if wall else {}
        top = max((k for k in used if k != OTHERS), key=lambda k: used[k], default="")
        return {
            "wall_s": round(wall, 3),
            "machine_cores_busy": round(machine / wall, 3) if wall else 0.0,
            "cores": dict(sorted(cores.items(), key=lambda kv: -kv[1])),
            "cpu_s": {k: round(v, 3) for k, v in used.items()},
            "share_of_ours": {k: round(v / ours, 3) for k, v in used.items() if k != OTHERS}
            if ours
            else {},
            "top_process": top,
        }
