"""Traces end to end, with every piece real: Jaeger's all-in-one (the built binary, in-memory
storage, on loopback) receives OTLP from the production ASGI server (daphne) and from the
outbox relay (`manage.py ledger_relay`), two processes sharing a database. A swtpm node agent
enrols through the server; the relay's ledger submission of that node's registration shows
up in Jaeger in the trace of the HTTP request that queued it, as that request's child."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from attest.agent.http import AgentApi, enrol
from attest.registrar_service import run_registrars
from tests.services import free_port
from tests.webapp.observability.binaries import get_json, require, stop, wait_until
from webapp.config import registrars_setting
from webapp.observability.binaries import JAEGER
from webapp.observability.relay_watch import SPAN_PREFIX

ROOT = Path(__file__).resolve().parents[3]
START_TIMEOUT_S = 90
TRACE_TIMEOUT_S = 60
COMMAND_TIMEOUT_S = 300

JAEGER_CONFIG = """
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query_port}
    grpc:
      endpoint: 127.0.0.1:{query_grpc_port}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp_port}
processors:
  batch:
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""

# The node, its fleet and its agent credential, in the servers' database (printed as JSON).
SETUP = """
import json, os, sys
import django
django.setup()
from decimal import Decimal
from webapp.attestation import actions as attestation_actions
from webapp.demo.seed import gpu_uuid
from webapp.fleet.catalogue import sync_catalogue
from webapp.fleet.models import GPU, Generation, Node, PcrPolicy, Site
sync_catalogue()
site = Site.objects.create(name="site")
policy = PcrPolicy.objects.create(name="golden", pcrs={"sha256": json.loads(sys.argv[1])})
node = Node.objects.create(name="node-1", site=site, pcr_policy=policy)
a100 = Generation.objects.get(catalogue_id="A100-SXM4-80GB")
for i in range(2):
    GPU.objects.create(uuid=gpu_uuid("node-1", i), node=node, index=i, generation=a100)
from webapp.demo.agents import simulated_inventory
from webapp.demo.governance import admin_clients, approve_fleet_policies
from webapp.outbox.ledger import close_ledger_client
with admin_clients() as admins:
    approve_fleet_policies(admins, policy)
close_ledger_client()
print(json.dumps({
    "token": attestation_actions.issue_node_credential(node, actor="test"),
    "inventory": simulated_inventory(node),
}))
"""


def start(cmd: list[str], env: dict[str, str], log: Path, ready_url: str) -> subprocess.Popen:
    """Start a server and wait until `ready_url` answers 200 (failing with its log)."""
    with log.open("w") as out:
        process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    wait_until(
        f"{' '.join(cmd[:3])} ready",
        lambda: urllib.request.urlopen(ready_url, timeout=5).status == 200,
        process,
        log,
        START_TIMEOUT_S,
    )
    return process


@dataclass
class Jaeger:
    query: str  # the query service's HTTP API
    otlp: str  # the OTLP/HTTP receiver
    process: subprocess.Popen
    log: Path


@pytest.fixture
def jaeger(tmp_path: Path) -> Iterator[Jaeger]:
    ports = {k: free_port() for k in ("query_port", "query_grpc_port", "otlp_port")}
    config = tmp_path / "jaeger.yaml"
    config.write_text(JAEGER_CONFIG.format(**ports))
    query = f"http://127.0.0.1:{ports['query_port']}"
    log = tmp_path / "jaeger.log"
    process = start(
        [str(require(JAEGER, "jaeger")), f"--config={config}"],
        dict(os.environ),
        log,
        query + "/api/services",
    )
    try:
        yield Jaeger(query, f"http://127.0.0.1:{ports['otlp_port']}", process, log)
    finally:
        stop(process)


def server_env(tmp_path: Path, ca, otlp: str, service: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    ek_ca = tmp_path / "ek-ca"
    ek_ca.mkdir()
    (tmp_path / "data").mkdir()
    shutil.copy(ca.root_cert_file, ek_ca / "root.pem")
    shutil.copy(ca.issuer_cert_file, ek_ca / "issuer.pem")
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    return {
        **env,
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "WATTLEASE_DATA_DIR": str(tmp_path / "data"),
        "TPM_EK_CA_DIR": str(ek_ca),
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp,
        "OTEL_SERVICE_NAME": service,
        "OTEL_BSP_SCHEDULE_DELAY": "200",  # ms: export promptly, the test waits for it
        "PYTHONUNBUFFERED": "1",
    }


def run(cmd: list[str], env: dict[str, str]) -> str:
    result = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
    )
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def traces_with(query: str, service: str, operation: str) -> list[dict]:
    params = urllib.parse.urlencode({"service": service, "operation": operation, "limit": 20})
    return get_json(f"{query}/api/traces?{params}").get("data") or []


@pytest.fixture
def registrars(tmp_path, ca) -> Iterator[str]:
    """Both organisations' registrars (REGISTRARS), trusting the swtpm's EK CA."""
    ek_ca = tmp_path / "registrar-ek-ca"
    ek_ca.mkdir()
    shutil.copy(ca.root_cert_file, ek_ca / "root.pem")
    shutil.copy(ca.issuer_cert_file, ek_ca / "issuer.pem")
    urls, stop_registrars = run_registrars(("Org1MSP", "Org2MSP"), ek_ca, tmp_path / "reg")
    yield registrars_setting(urls)
    stop_registrars()


def test_a_relayed_ledger_submit_is_a_child_of_the_request_that_queued_it(
    tmp_path, jaeger, ca, agent, registrars
):
    service = f"wattlease-test-{secrets.token_hex(4)}"
    env = {**server_env(tmp_path, ca, jaeger.otlp, service), "REGISTRARS": registrars}
    golden = {str(i): v.hex() for i, v in agent.read_pcrs("sha256:0,2,7")["sha256"].items()}
    run([sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"], env)
    issued = json.loads(run([sys.executable, "-c", SETUP, json.dumps(golden)], env))
    port = free_port()
    daphne = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
    server = start(
        [*daphne, "webapp.asgi:application"],
        env,
        tmp_path / "daphne.log",
        f"http://127.0.0.1:{port}/admin/login/",
    )
    try:
        api = AgentApi(f"http://127.0.0.1:{port}", issued["token"])
        enrol(agent, api, inventory=issued["inventory"])  # queues RegisterNode
    finally:
        stop(server)  # SIGTERM: its span processor flushes on the way out
    relayed = run([sys.executable, "manage.py", "ledger_relay", "--once"], env)
    assert "done 1" in relayed, relayed

    operation = SPAN_PREFIX + "RegisterNode"
    (found,) = wait_until(
        "the relay's span in Jaeger",
        lambda: traces_with(jaeger.query, service, operation),
        jaeger.process,
        jaeger.log,
        TRACE_TIMEOUT_S,
    )
    spans = {s["spanID"]: s for s in found["spans"]}
    (submit,) = [s for s in spans.values() if s["operationName"] == operation]
    parents = [r for r in submit["references"] if r["refType"] == "CHILD_OF"]
    assert len(parents) == 1, f"the relay's span has no parent in the request's trace: {submit}"
    (parent_ref,) = parents
    assert parent_ref["traceID"] == submit["traceID"] == found["traceID"]
    request = spans[parent_ref["spanID"]]  # the server's span, exported by daphne
    tags = {t["key"]: t["value"] for t in request["tags"]}
    assert "enrol/activate" in request["operationName"] + str(tags.get("http.route", ""))
    assert tags.get("http.response.status_code", tags.get("http.status_code")) == 200
    submit_tags = {t["key"]: t["value"] for t in submit["tags"]}
    assert submit_tags["wattlease.ledger.outcome"] == "done"
    assert submit_tags["wattlease.ledger.tx_id"]
