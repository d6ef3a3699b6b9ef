"""A production deployment for tests, started as an operator would: a private PostgreSQL
and Redis, `WATTLEASE_ENV=production`, migrations, a fleet seeded as in the admin, the
server (gunicorn, two ASGI workers), the workers named by the test, and a real node agent
on a swtpm. No demo code runs."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from attest.agent.tpm import Agent
from attest.registrar_service import run_registrars
from tests.services import _wait_for_port, free_port, temporary_postgres, temporary_redis
from webapp.config import registrars_setting

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
DEADLINE_S = 120.0
HTTP_TIMEOUT_S = 30.0  # a busy shared machine can be slow to answer
LEDGER_ORGS = ("Org1MSP", "Org2MSP")  # the settings' default channel
WORKERS = ("lease_worker", "ledger_relay", "attestation_watch")


class Api:
    """The tenant API over HTTP with one key."""

    def __init__(self, base: str, key: str) -> None:
        self.base, self.key = base, key

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, Any]:
        request = urllib.request.Request(
            self.base + path,
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")


@dataclass
class Deployment:
    env: dict[str, str]
    logs: Path
    api: Api
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> None:
        log = (self.logs / f"{name}.log").open("a")
        self.processes[name] = subprocess.Popen(
            cmd, cwd=ROOT, env=env or self.env, stdout=log, stderr=subprocess.STDOUT
        )

    def start_worker(self, name: str) -> None:
        self.start(name, [PY, "manage.py", name])

    def kill(self, name: str) -> None:
        """kill -9: no clean-up, whatever it was doing stops at once."""
        process = self.processes.pop(name)
        process.kill()
        process.wait()

    def manage(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [PY, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True
        )

    def wait_for(self, what: str, check: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            time.sleep(0.3)
        tails = "\n".join(
            f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.logs.glob("*.log"))
        )
        pytest.fail(f"timed out waiting for {what}\n{tails}")

    def answers(self) -> bool:
        try:
            return self.api.call("GET", "/api/v1/leases/")[0] == 200
        except OSError:  # not listening yet, or too slow
            return False

    def stop_all(self) -> None:
        for process in self.processes.values():
            process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _golden_values(tpm) -> dict:
    """The node's PCRs as an operator records them from a reference machine."""
    with Agent(tpm.tcti) as reader:
        values = reader.read_pcrs("sha256:0,2,7")["sha256"]
    return {"sha256": {str(i): v.hex() for i, v in values.items()}}


@contextmanager
def deployment(tmp: Path, tpm, ca, **settings: str) -> Iterator[Deployment]:
    ek_ca = tmp / "ek-ca"
    ek_ca.mkdir()
    shutil.copy(ca.root_cert_file, ek_ca / "root.pem")
    shutil.copy(ca.issuer_cert_file, ek_ca / "issuer.pem")
    golden = _golden_values(tpm)
    logs = tmp / "logs"
    logs.mkdir()
    with ExitStack() as stack:
        database_url = stack.enter_context(temporary_postgres())
        redis_url = stack.enter_context(temporary_redis())
        # each organisation's registrar (docs/operations.md, "Registrars"), run by the test
        registrars, stop_registrars = run_registrars(LEDGER_ORGS, ek_ca, tmp / "registrars")
        stack.callback(stop_registrars)
        inherited = {
            k: v
            for k, v in os.environ.items()
            if k not in ("DJANGO_SETTINGS_MODULE", "WATTLEASE_ENV", "DATABASE_URL", "REDIS_URL")
            and not k.startswith("PYTEST")
        }
        env = {
            **inherited,
            "DJANGO_SETTINGS_MODULE": "webapp.settings",
            "WATTLEASE_ENV": "production",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": "127.0.0.1",
            "SECURE_SSL_REDIRECT": "0",  # plain HTTP on loopback: no TLS proxy here
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "WATTLEASE_DATA_DIR": str(tmp / "data"),
            "LEDGER_PATH": str(tmp / "ledger.sqlite3"),
            "TPM_EK_CA_DIR": str(ek_ca),
            "REGISTRARS": registrars_setting(registrars),
            "LEASE_WORKER_INTERVAL_S": "1",
            "ATTESTATION_INTERVAL_S": "3",
            "AGENT_RATE_PER_NODE": "120/min",
            "PYTHONUNBUFFERED": "1",
            **settings,
        }
        subprocess.run([PY, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
        seeded = subprocess.run(
            [PY, "-m", "tests.webapp.production_fleet", json.dumps(golden)],
            cwd=ROOT, env=env, check=True, capture_output=True, text=True,
        )  # fmt: skip
        issued = json.loads(seeded.stdout.strip().splitlines()[-1])
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        deployed = Deployment(env=env, logs=logs, api=Api(base, issued["api_key"]))
        stack.callback(deployed.stop_all)
        deployed.start(
            "server",
            [PY, "-m", "gunicorn", "--worker-class", "asgi", "--workers", "2",
             "--bind", f"127.0.0.1:{port}", "webapp.asgi:application"],
        )  # fmt: skip
        for name in WORKERS:
            deployed.start_worker(name)
        _wait_for_port(port, deployed.processes["server"], "gunicorn")
        deployed.wait_for("the server to answer", deployed.answers)
        inventory = tmp / "gpus.json"
        inventory.write_text(json.dumps(issued["inventory"]))
        deployed.start(
            "agent",
            [PY, "-m", "attest", "agent", "--tcti", tpm.tcti, "--state", str(tmp / "agent.json"),
             "run", "--server", base, "--inventory", str(inventory)],
            env={**env, "WATTLEASE_NODE_CREDENTIAL": issued["node_credential"]},
        )  # fmt: skip
        yield deployed
