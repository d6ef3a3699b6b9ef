"""The GPU host's energy-counter log: telemetry samples (NVML, or a replayed trace) appended
as canonical CSV rows (attest.readings) to a file the node agent reads, so each of its
quotes binds the readings taken since the previous one (`python -m attest agent run
--readings FILE`; docs/billing.md, "Attested telemetry")."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from attest.readings import row_text
from scheduler.telemetry.sample import TelemetrySample


def append_rows(samples: Iterable[TelemetrySample], path: Path, max_samples: int = 0) -> int:
    """Append each sample as one whole line (flushed, so the agent never reads half a row);
    stop after `max_samples` (0: when the source ends). Returns how many were written."""
    written = 0
    with path.open("a", encoding="ascii") as log:
        for sample in samples:
            log.write(row_text(sample.canonical()) + "\n")
            log.flush()
            written += 1
            if max_samples and written >= max_samples:
                break
    return written
