"""The whole test suite, as `make test` and CI run it.

1. static checks: ruff (lint + format), Django's system checks, no missing migration, mypy,
   the import contracts (import-linter), a sample of the mutation testing
   (tests/mutation_sample.py);
   then Prometheus, promtool and Jaeger are built when the cache lacks them (their tests
   need them and fail, never skip, without them);
2. every test with the embedded defaults (SQLite, in-memory channel layer);
3. the web app's tests again on the production path: a private PostgreSQL and Redis (its
   Fabric tests too, where Fabric's binaries are installed);
4. the tests marked `fabric` on a real Fabric network, wherever Fabric's binaries are
   installed (the project's build cache or FABRIC_BIN_DIR); elsewhere a loud notice says they
   did not run and why.
Any failure, and any run that collected no test, makes the exit status non-zero.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.services import temporary_postgres, temporary_redis

PY = sys.executable
NO_TESTS_COLLECTED = 5
# Not a silent skip: said on every run where Fabric's binaries are not installed.
FABRIC_NOTICE = """
!!! NOT RUN: tests marked `fabric` (a real Fabric network: the contract suite on Fabric,
!!! the fault tests, the web app on Fabric, organisations on separate hosts). {why}
!!! Install Fabric's binaries (`python -m chaincode_client.fabric_network build`, or set
!!! FABRIC_BIN_DIR to a Fabric 2.5 release's bin/) and Fabric CA's (`go install
!!! github.com/hyperledger/fabric-ca/cmd/...@v1.5.21`, then FABRIC_CA_BIN_DIR, or a Fabric CA
!!! 1.5 release's bin/), then run `make test` again.
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


def fabric_install_problem() -> str | None:
    """Why Fabric's or Fabric CA's binaries cannot be used here, or None when they can (every
    Fabric network's identities come from its organisations' own Fabric CAs)."""
    from chaincode_client.fabric_network.fabric_ca import find_ca_install
    from chaincode_client.fabric_network.layout import NetworkError, find_install

    problems = []
    for find in (find_install, find_ca_install):
        try:
            find()
        except NetworkError as exc:
            problems.append(str(exc))
    return "\n!!! ".join(problems) or None


def main() -> None:
    # the checks and tests ask for development mode; a plain start is production-shaped
    os.environ.setdefault("WATTLEASE_ENV", "development")
    step("ruff lint", [PY, "-m", "ruff", "check", "."])
    step("ruff format", [PY, "-m", "ruff", "format", "--check", "."])
    step("django checks", [PY, "manage.py", "check", "--fail-level", "WARNING"])
    step("migrations", [PY, "manage.py", "makemigrations", "--check", "--dry-run"])
    step("mypy (pure libraries)", [PY, "-m", "mypy"])
    step("import contracts (import-linter)", [str(Path(PY).with_name("lint-imports"))])
    step(
        "mutation sample (mutmut; `make mutation` runs them all)",
        [PY, "-m", "tests.mutation_sample"],
    )
    step("observability binaries (cached go install)", [PY, "-m", "webapp.observability", "build"])
    fabric_missing = fabric_install_problem()
    step(
        "tests (SQLite, embedded ledger)",
        [PY, "-m", "pytest", "-p", "no:cacheprovider", "-m", "not fabric"],
    )
    print("\n=== starting private PostgreSQL and Redis for the production-path run", flush=True)
    # the web app's Fabric tests run on PostgreSQL too where Fabric is installed; elsewhere
    # they are left out here as in the SQLite stage, and the notice below says so
    on_fabric = ["-m", "not fabric"] if fabric_missing else []
    with temporary_postgres() as database_url, temporary_redis() as redis_url:
        step(
            "web app tests (PostgreSQL, Redis)",
            [PY, "-m", "pytest", "-p", "no:cacheprovider", *on_fabric, "tests/webapp"],
            env={"DATABASE_URL": database_url, "REDIS_URL": redis_url},
        )
    if fabric_missing:
        print(FABRIC_NOTICE.format(why=fabric_missing), flush=True)
        print("\nAll test stages that could run passed; the Fabric stage did NOT run.")
        return
    step(
        "Fabric tests (a real network: 3 Raft orderers, 2 organisations)",
        [PY, "-m", "pytest", "-p", "no:cacheprovider", "-m", "fabric"],
    )
    print("\nAll test stages passed, the Fabric stage included.")


if __name__ == "__main__":
    main()
