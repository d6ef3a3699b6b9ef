"""The loop every long-running worker command shares: a pass, a report of what it did, a
wait, until SIGTERM/SIGINT (or after one pass with --once)."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand
from django.db import close_old_connections


class WorkerCommand(BaseCommand):
    """Subclasses define `run_pass() -> dict[str, int]` (counts of what was done) and
    `wait_s(counts) -> float` (how long to wait before the next pass)."""

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="one pass, then exit")

    def run_pass(self) -> dict[str, int]:
        raise NotImplementedError

    def wait_s(self, counts: dict[str, int]) -> float:
        raise NotImplementedError

    def setup(self) -> None:
        """Before the first pass (open clients)."""

    def teardown(self) -> None:
        """After the last pass, also after an error (close clients)."""

    def handle(self, *args: Any, once: bool, **options: Any) -> None:
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        self.setup()
        try:
            while not stop.is_set():
                try:
                    counts = self.run_pass()
                finally:
                    close_old_connections()
                if counts:
                    self.stdout.write(", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
                if once:
                    break
                stop.wait(self.wait_s(counts))
        finally:
            self.teardown()
