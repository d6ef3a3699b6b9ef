"""The whole test suite, as `make test` and CI run it.

1. static checks: ruff (lint + format), Django's system checks, no missing migration;
2. every test with the embedded defaults (SQLite, in-memory channel layer);
3. the web app's tests again on the production path: a private PostgreSQL and Redis.
Any failure, and any run that collected no test, makes the exit status non-zero.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.services import temporary_postgres, temporary_redis

PY = sys.executable
NO_TESTS_COLLECTED = 5
# Not a silent skip: said on every run, and the reason is issue 5's blocker.
FABRIC_NOTICE = """
!!! NOT RUN: tests marked `fabric` (a real Fabric network). The Go module proxy answers
!!! 403 Forbidden for every github.com/hyperledger/* module, so Fabric's peer and orderer
!!! cannot be built here (issue 5 is blocked on this). Run them where Fabric builds:
!!!   .venv/bin/python -m pytest -m fabric tests/fabric
"""


def step(title: str, cmd: list[str], env: dict[str, str] | None = None) -> None:
    print(f"\n=== {title}: {' '.join(cmd)}", flush=True)
    started = time.monotonic()
    code = subprocess.call(cmd, env={**os.environ, **(env or {})})
    print(f"=== {title}: exit {code} after {time.monotonic() - started:.0f} s", flush=True)
    if code == NO_TESTS_COLLECTED:
        sys.exit(f"{title}: no tests were collected")
    if code != 0:
        sys.exit(f"{title} failed (exit {code})")


def main() -> None:
    # the checks and tests ask for development mode; a plain start is production-shaped
    os.environ.setdefault("WATTLEASE_ENV", "development")
    step("ruff lint", [PY, "-m", "ruff", "check", "."])
    step("ruff format", [PY, "-m", "ruff", "format", "--check", "."])
    step("django checks", [PY, "manage.py", "check", "--fail-level", "WARNING"])
    step("migrations", [PY, "manage.py", "makemigrations", "--check", "--dry-run"])
    step("mypy (pure libraries)", [PY, "-m", "mypy"])
    print(FABRIC_NOTICE, flush=True)
    step(
        "tests (SQLite, embedded ledger)",
        [PY, "-m", "pytest", "-p", "no:cacheprovider", "-m", "not fabric"],
    )
    print("\n=== starting private PostgreSQL and Redis for the production-path run", flush=True)
    with temporary_postgres() as database_url, temporary_redis() as redis_url:
        step(
            "web app tests (PostgreSQL, Redis)",
            [PY, "-m", "pytest", "-p", "no:cacheprovider", "tests/webapp"],
            env={"DATABASE_URL": database_url, "REDIS_URL": redis_url},
        )
    print("\nAll test stages passed.")


if __name__ == "__main__":
    main()
