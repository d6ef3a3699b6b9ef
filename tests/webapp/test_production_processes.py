"""The production processes, and no demo code: the ASGI server (gunicorn, two ASGI
workers), the lease worker, the ledger relay and the attestation watch, on a private
PostgreSQL and Redis, with a real node agent on a swtpm. A tenant requests a lease through
the API and sees it placed, active on the ledger, ended and settled."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from attest.agent.tpm import Agent
from ledger.receipt import verify_receipt
from tests.services import _wait_for_port, free_port, temporary_postgres, temporary_redis

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
DEADLINE_S = 120.0
LEASE_HOUR_S = 1000  # the lease below (0.01 h) runs for 10 s of wall time


def _environment(tmp: Path, database_url: str, redis_url: str, ek_ca: Path) -> dict[str, str]:
    inherited = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DJANGO_SETTINGS_MODULE", "WATTLEASE_ENV", "DATABASE_URL", "REDIS_URL")
        and not k.startswith("PYTEST")
    }
    return {
        **inherited,
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "WATTLEASE_ENV": "production",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECURE_SSL_REDIRECT": "0",  # plain HTTP on loopback: no TLS proxy in this test
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "WATTLEASE_DATA_DIR": str(tmp / "data"),
        "LEDGER_PATH": str(tmp / "ledger.sqlite3"),
        "TPM_EK_CA_DIR": str(ek_ca),
        "LEASE_HOUR_S": str(LEASE_HOUR_S),
        "LEASE_WORKER_INTERVAL_S": "1",
        "ATTESTATION_INTERVAL_S": "5",
        "AGENT_RATE_PER_NODE": "120/min",
        "PYTHONUNBUFFERED": "1",
    }


@contextmanager
def process(cmd: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_for(what: str, check, logs: Path):
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.3)
    tails = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(logs.glob("*.log")))
    pytest.fail(f"timed out waiting for {what}\n{tails}")


class Api:
    def __init__(self, base: str, key: str) -> None:
        self.base, self.key = base, key

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        request = urllib.request.Request(
            self.base + path,
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")


def test_a_lease_runs_its_whole_life_on_the_production_processes(tmp_path, tpm, ca):
    ek_ca = tmp_path / "ek-ca"
    ek_ca.mkdir()
    shutil.copy(ca.root_cert_file, ek_ca / "root.pem")
    shutil.copy(ca.issuer_cert_file, ek_ca / "issuer.pem")
    with Agent(tpm.tcti) as reader:  # golden values, as recorded from a reference machine
        values = reader.read_pcrs("sha256:0,2,7")["sha256"]
    golden = {"sha256": {str(i): v.hex() for i, v in values.items()}}
    logs = tmp_path / "logs"
    logs.mkdir()
    with ExitStack() as stack:
        database_url = stack.enter_context(temporary_postgres())
        redis_url = stack.enter_context(temporary_redis())
        env = _environment(tmp_path, database_url, redis_url, ek_ca)
        subprocess.run([PY, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
        seeded = subprocess.run(
            [PY, "-m", "tests.webapp.production_fleet", json.dumps(golden)],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        secrets_ = json.loads(seeded.stdout.strip().splitlines()[-1])
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        server = stack.enter_context(
            process(
                [PY, "-m", "gunicorn", "--worker-class", "asgi", "--workers", "2",
                 "--bind", f"127.0.0.1:{port}", "webapp.asgi:application"],
                env, logs / "server.log",
            )
        )  # fmt: skip
        for name in ("lease_worker", "ledger_relay", "attestation_watch"):
            stack.enter_context(process([PY, "manage.py", name], env, logs / f"{name}.log"))
        _wait_for_port(port, server, "gunicorn")
        agent_env = {**env, "WATTLEASE_NODE_CREDENTIAL": secrets_["node_credential"]}
        stack.enter_context(
            process(
                [PY, "-m", "attest", "agent", "--tcti", tpm.tcti,
                 "--state", str(tmp_path / "agent.json"),
                 "run", "--server", base, "--interval", "3"],
                agent_env, logs / "agent.log",
            )
        )  # fmt: skip
        api = Api(base, secrets_["api_key"])

        status, lease = api.call(
            "POST", "/api/leases/", {"gpu_count": 2, "precision": "FP16", "hours": "0.01"}
        )
        assert status == 201, lease
        path = f"/api/leases/{lease['id']}/"

        def state_is(*wanted: str):
            status, body = api.call("GET", path)
            return body if status == 200 and body["state"] in wanted else None

        placed = wait_for("placement", lambda: state_is("placed", "active"), logs)
        assert len(placed["gpus"]) == 2 and placed["price_total_micro"] > 0
        active = wait_for("activation on the ledger", lambda: state_is("active"), logs)
        assert active["started"]
        status, receipt = api.call("GET", f"{path}receipt/")
        assert status == 200 and verify_receipt(receipt) == []
        settled = wait_for("expiry and settlement", lambda: state_is("settled"), logs)
        assert settled["ended"] and len(settled["settlements"]) == 1

        def settlement_on_ledger():
            body = state_is("settled")
            return body if body and body["settlements"][0]["ledger_tx"] else None

        wait_for("the settlement on the ledger", settlement_on_ledger, logs)
        status, receipt = api.call("GET", f"{path}receipt/")
        assert status == 200 and verify_receipt(receipt) == []
        recorded = json.dumps(receipt)
        assert all(f in recorded for f in ("CreateLease", "EndLease", "Settle"))
        assert server.poll() is None  # nothing crashed on the way
