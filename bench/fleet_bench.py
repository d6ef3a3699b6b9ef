"""A fleet on one app server: N nodes of 8 GPUs run the agent protocol (challenge -> quote
with telemetry -> verification -> database -> outbox -> ledger) against the production
serving layout of docs/operations.md (gunicorn's sync WSGI workers, cores + 1, for HTTP;
lease worker, ledger relay, attestation watch, telemetry retention) on a private PostgreSQL
and Redis (tests/services.py). The websocket server of that layout is not started: no agent
uses it. `--server asgi2` serves HTTP from two ASGI workers instead, for comparison.

    python bench/fleet_bench.py [--gpus 1000,5000,10000] [--seconds 300] [--warm-s 90]
                                [--quote-s 60] [--sample-s 10] [--swtpm 2] [--server wsgi3]

Nodes: the first --swtpm are real swtpm TPMs driven through tpm2-pytss
(attest.agent.tpm.Agent); the others are software TPMs (bench/software_node.py: the same
agent client, EK certificate chain, credential activation and TPMS_ATTEST quotes, signed by
keys in this process). Every node samples its 8 GPUs every --sample-s and sends the readings
with a quote every --quote-s (phases spread over the interval). After --warm-s the bench
measures --seconds: CPU of each process (/proc, children included: PostgreSQL's backends
count), agent request latencies, outbox lag (done - created of the rows created in the
window) and database growth, per GPU-hour and per GPU-day. `--check` then stops the load and
checks nothing was lost (bench/fleet_check.py); `tests/bench/test_fleet_bench.py` runs it
small in CI.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from attest import readings as telemetry  # noqa: E402
from attest.agent.http import AgentApi, attest_once, enrol  # noqa: E402
from bench import web_bench  # noqa: E402
from bench.proc_cpu import machine_busy_s, process_cpu_s  # noqa: E402
from bench.software_node import SoftwareEkCa, SoftwareTpm, golden  # noqa: E402
from tests.services import (  # noqa: E402
    _wait_for_port,
    free_port,
    temporary_postgres,
    temporary_redis,
)

PY = sys.executable
GPUS_PER_NODE = 8
WORKERS = ("lease_worker", "ledger_relay", "attestation_watch", "telemetry_retention")
AGENT_THREADS = 96  # rounds in flight at once (a round waits for its challenge)
ENROL_THREADS = 8
ENROL_ATTEMPTS = 3
HTTP_OK = 200
MS_PER_S = 1000
S_PER_HOUR = 3600
S_PER_DAY = 86_400
READY_S = 300.0  # gunicorn boots in minutes on a loaded shared machine
IDLE_W = 60
AGENT_RATE_PER_NODE_MIN = 600  # requests a node may send per minute (production: 30)
DEFAULT_SERVER = "wsgi3"  # docs/operations.md: sync workers, cores + 1, on 2 cores


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of `pid`, its live children, and the children it has reaped (PostgreSQL's
    backends come and go; their time lands in the postmaster's cutime/cstime)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    reaped = (int(fields[13]) + int(fields[14])) / ticks
    children = Path(f"/proc/{pid}/task/{pid}/children")
    live = children.read_text().split() if children.exists() else []
    return process_cpu_s(pid) + reaped + sum(tree_cpu_s(int(c)) for c in live)


@dataclass
class Node:
    name: str
    credential: str
    inventory: list[dict[str, str]]
    tpm: Any
    ak: Any = None
    energy: dict[str, int] = field(default_factory=dict)
    last_sample_ms: int = 0
    sent_readings: int = 0
    sent_quotes: list[str] = field(default_factory=list)  # nonces
    failures: list[str] = field(default_factory=list)


class TimedApi(AgentApi):
    """The agent client, recording each request's latency."""

    def __init__(self, server: str, token: str, log: list[tuple[float, str, float]]) -> None:
        super().__init__(server, token)
        self.log = log

    def post(self, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        started = time.monotonic()
        try:
            return super().post(path, payload)
        finally:
            self.log.append((started, path, time.monotonic() - started))


def readings_since(node: Node, now_ms: int, sample_ms: int) -> str:
    """The node's GPU readings taken every sample_ms since its previous quote."""
    rows = []
    t = node.last_sample_ms + sample_ms if node.last_sample_ms else now_ms - now_ms % sample_ms
    while t <= now_ms:
        for gpu in node.inventory:
            uuid = gpu["uuid"]
            power_w = random.randint(IDLE_W, 400)
            node.energy[uuid] = node.energy.get(uuid, 10**9) + power_w * sample_ms
            util = random.randint(0, 100)
            rows.append(f"{t},{uuid},{node.energy[uuid]},{power_w * 1000},{util},{util // 2},55")
        node.last_sample_ms = t
        t += sample_ms
    return "".join(r + "\n" for r in sorted(rows, key=lambda r: r.split(",", 2)[1]))


@dataclass
class Deployment:
    env: dict[str, str]
    base: str
    api_key: str
    database_url: str
    pids: dict[str, int]
    processes: list[subprocess.Popen]
    logs: Path


def deploy(stack: ExitStack, tmp: Path, nodes: int, swtpm: int, quote_s: int, layout: str) -> tuple:
    from attest.agent.tpm import Agent
    from attest.swtpm import LocalCA, start_node_tpm

    ek_ca = tmp / "ek-ca"
    software_ca = SoftwareEkCa()
    software_ca.write_root(ek_ca)
    tpms = []
    swtpm_golden = golden()
    if swtpm:
        ca = LocalCA(tmp / "swtpm-ca")
        for n in range(swtpm):
            tpm = start_node_tpm(tmp / f"tpm-{n}", ca)
            stack.callback(tpm.stop)
            tpms.append(tpm)
        shutil.copy(ca.root_cert_file, ek_ca / "root.pem")
        shutil.copy(ca.issuer_cert_file, ek_ca / "issuer.pem")
        with Agent(tpms[0].tcti) as reader:
            values = reader.read_pcrs("sha256:0,2,7")["sha256"]
        swtpm_golden = {"sha256": {str(i): v.hex() for i, v in values.items()}}
    database_url = stack.enter_context(temporary_postgres())
    redis_url = stack.enter_context(temporary_redis())
    # each organisation's registrar (docs/operations.md, "Registrars"), run by the bench
    from attest.registrar_service import run_registrars
    from webapp.config import registrars_setting

    registrars, stop_registrars = run_registrars(("Org1MSP", "Org2MSP"), ek_ca, tmp / "reg")
    stack.callback(stop_registrars)
    logs = tmp / "logs"
    logs.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST")},
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "WATTLEASE_ENV": "production",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECURE_SSL_REDIRECT": "0",
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "WATTLEASE_DATA_DIR": str(tmp / "data"),
        "LEDGER_PATH": str(tmp / "ledger.sqlite3"),
        "TPM_EK_CA_DIR": str(ek_ca),
        "REGISTRARS": registrars_setting(registrars),
        "ATTESTATION_INTERVAL_S": str(quote_s),
        "ATTESTATION_MAX_AGE_S": str(quote_s * 5),
        "TELEMETRY_SETTLE_WAIT_S": str(quote_s * 2),
        "AGENT_RATE_PER_NODE": f"{AGENT_RATE_PER_NODE_MIN}/min",
        # every node here connects from 127.0.0.1, where a fleet's come from an address each:
        # the per-address budget is the sum of the nodes' (else the bench measures 429s)
        "API_RATE_PER_IP": f"{nodes * AGENT_RATE_PER_NODE_MIN // 60}/s",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("WATTLEASE_DATA_DIR_UNUSED", None)
    for key in ("LEASE_HOUR_S", "LEASE_WORKER_INTERVAL_S"):
        if key in os.environ:
            env[key] = os.environ[key]
    subprocess.run([PY, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    seeded = subprocess.run(
        [PY, "-m", "bench.fleet_seed", str(nodes), str(swtpm), json.dumps(swtpm_golden),
         json.dumps(golden())],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    issued = json.loads(seeded.stdout.strip().splitlines()[-1])
    port = free_port()
    processes: list[subprocess.Popen] = []

    def start(name: str, cmd: list[str]) -> subprocess.Popen:
        out = (logs / f"{name}.log").open("a")
        process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        processes.append(process)
        return process

    def stop_all() -> None:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()

    stack.callback(stop_all)
    server = start("server", web_bench.command(layout, port))  # the layouts web_bench serves
    pids = {"server": server.pid}
    for name in WORKERS:
        pids[name] = start(name, [PY, "manage.py", name]).pid
    _wait_for_port(port, server, "gunicorn")
    postgres = psycopg.connect(database_url, autocommit=True)
    pids["postgresql"] = postgres.execute(
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'"
    ).fetchone()[0]
    pids["postgresql"] = int(Path(f"/proc/{pids['postgresql']}/stat").read_text().split()[3])
    postgres.close()
    redis_port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    pids["redis"] = _pid_listening(redis_port)
    deployed = Deployment(
        env, f"http://127.0.0.1:{port}", issued["api_key"], database_url, pids, processes, logs
    )
    _wait_until_answering(deployed)
    made = []
    for n, spec in enumerate(issued["nodes"]):
        tpm = Agent(tpms[n].tcti) if spec["swtpm"] else SoftwareTpm(software_ca, spec["name"])
        if spec["swtpm"]:
            stack.callback(tpm.close)
        made.append(Node(spec["name"], spec["credential"], spec["inventory"], tpm))
    return deployed, made


def _wait_until_answering(deployed: Deployment) -> None:
    """gunicorn listens before its workers have imported Django (tens of seconds on a busy
    machine): wait for an answer from the API."""
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        request = urllib.request.Request(
            deployed.base + "/api/v1/leases/",
            headers={"Authorization": f"Bearer {deployed.api_key}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                if response.status == HTTP_OK:
                    return
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"the server did not answer within {READY_S:.0f} s")


def _pid_listening(port: int) -> int:
    """The pid of the process listening on a loopback TCP port (from /proc/net/tcp)."""
    wanted = f":{port:04X}"
    inodes = {
        line.split()[9]
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]
        if line.split()[1].endswith(wanted) and line.split()[3] == "0A"
    }
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(proc.name)
        except OSError:
            continue
    return 0


class Fleet:
    """Every node's rounds, each due every quote_s, run by a pool of threads."""

    def __init__(self, deployed: Deployment, nodes: list[Node], quote_s: int, sample_s: int):
        self.deployed, self.nodes = deployed, nodes
        self.quote_s, self.sample_ms = quote_s, sample_s * MS_PER_S
        self.log: list[tuple[float, str, float]] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.due: list[tuple[float, int]] = []
        self.late: list[float] = []
        self.apis = [TimedApi(deployed.base, n.credential, self.log) for n in nodes]

    def enrol_all(self) -> None:
        def work(indexes: list[int]) -> None:
            for i in indexes:
                node = self.nodes[i]
                for attempt in range(ENROL_ATTEMPTS):
                    try:
                        node.ak = enrol(node.tpm, self.apis[i], inventory=node.inventory)
                        break
                    except Exception as exc:  # a slow answer: enrol afresh
                        node.failures.append(f"enrol {attempt}: {type(exc).__name__}: {exc}")

        chunks = [list(range(k, len(self.nodes), ENROL_THREADS)) for k in range(ENROL_THREADS)]
        threads = [threading.Thread(target=work, args=(c,)) for c in chunks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def start(self) -> list[threading.Thread]:
        now = time.monotonic()
        self.due = [(now + random.uniform(0, self.quote_s), i) for i in range(len(self.nodes))]
        heapq.heapify(self.due)
        threads = [threading.Thread(target=self._worker, daemon=True) for _ in range(AGENT_THREADS)]
        for t in threads:
            t.start()
        return threads

    def _worker(self) -> None:
        while not self.stop.is_set():
            with self.lock:
                if not self.due:  # every node's round is in flight
                    when = None
                else:
                    when, i = heapq.heappop(self.due)
            if when is None:
                self.stop.wait(0.05)
                continue
            wait = when - time.monotonic()
            if wait > 0 and self.stop.wait(wait):
                return
            self.late.append(max(0.0, -wait))
            node = self.nodes[i]
            text = readings_since(node, int(time.time() * MS_PER_S), self.sample_ms)
            try:
                verdict = attest_once(node.tpm, self.apis[i], node.ak, text)
                if verdict.get("valid"):
                    node.sent_quotes.append(verdict.get("nonce", ""))
                    node.sent_readings += len(telemetry.parse_rows(text))
                else:
                    node.failures.append(json.dumps(verdict.get("reasons"))[:200])
            except Exception as exc:  # a refused or timed-out round is counted, not fatal
                node.failures.append(f"{type(exc).__name__}: {exc}"[:200])
            with self.lock:
                heapq.heappush(self.due, (when + self.quote_s, i))


def db_sizes(database_url: str) -> dict[str, int]:
    """Bytes on disk per table (partitions summed into their parent), indexes included."""
    with psycopg.connect(database_url, autocommit=True) as db:
        rows = db.execute(
            "SELECT coalesce(p.relname, c.relname), sum(pg_total_relation_size(c.oid)) "
            "FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid "
            "LEFT JOIN pg_class p ON p.oid = i.inhparent "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind = 'r' AND n.nspname = 'public' GROUP BY 1"
        ).fetchall()
    return {name: int(size) for name, size in rows}


def outbox_lag(database_url: str, since: float, until: float) -> dict[str, float]:
    with psycopg.connect(database_url, autocommit=True) as db:
        rows = db.execute(
            "SELECT extract(epoch FROM done - created) FROM outbox_outboxentry "
            "WHERE created >= to_timestamp(%s) AND created < to_timestamp(%s) "
            "AND done IS NOT NULL",
            [since, until],
        ).fetchall()
        pending = db.execute(
            "SELECT count(*) FROM outbox_outboxentry WHERE created < to_timestamp(%s) "
            "AND done IS NULL",
            [until],
        ).fetchone()[0]
    lags = [float(r[0]) for r in rows]
    return {
        "p50_s": percentile(lags, 0.5),
        "p99_s": percentile(lags, 0.99),
        "max_s": max(lags, default=float("nan")),
        "rows": len(lags),
        "pending": int(pending),
    }


def run_level(gpus: int, seconds: float, warm_s: float, quote_s: int, sample_s: int,
              swtpm: int, check: bool = False,
              server: str = DEFAULT_SERVER) -> dict[str, Any]:  # fmt: skip
    nodes = max(1, gpus // GPUS_PER_NODE)
    tmp = Path(tempfile.mkdtemp(prefix="wattlease-fleet-"))
    try:
        with ExitStack() as stack:
            started = time.monotonic()
            deployed, made = deploy(stack, tmp, nodes, min(swtpm, nodes), quote_s, server)
            fleet = Fleet(deployed, made, quote_s, sample_s)
            fleet.enrol_all()
            setup_s = time.monotonic() - started
            threads = fleet.start()
            lease = None
            if check:
                from bench.fleet_check import request_lease

                lease = request_lease(deployed)
            time.sleep(warm_s)
            sizes0, busy0, wall0 = db_sizes(deployed.database_url), machine_busy_s(), time.time()
            cpu0 = {name: tree_cpu_s(pid) for name, pid in deployed.pids.items()}
            mono0, log0, late0 = time.monotonic(), len(fleet.log), len(fleet.late)
            time.sleep(seconds)
            cpu1 = {name: tree_cpu_s(pid) for name, pid in deployed.pids.items()}
            busy1, wall1, mono1 = machine_busy_s(), time.time(), time.monotonic()
            sizes1 = db_sizes(deployed.database_url)
            window = fleet.log[log0:]
            late = fleet.late[late0:]
            fleet.stop.set()
            for t in threads:
                t.join(timeout=60)
            lag = outbox_lag(deployed.database_url, wall0, wall1)
            measured = (mono1 - mono0, cpu0, cpu1, busy1 - busy0, sizes0, sizes1)
            result = report(gpus, nodes, *measured, window, late, lag, quote_s, sample_s,
                            setup_s, fleet)  # fmt: skip
            result["server"] = server
            if check:
                from bench.fleet_check import check_nothing_lost

                result["check"] = check_nothing_lost(deployed, made, lease)
            if os.environ.get("FLEET_BENCH_LOGS"):  # where to keep the deployment's logs
                shutil.copytree(tmp / "logs", os.environ["FLEET_BENCH_LOGS"], dirs_exist_ok=True)
            return result
    except BaseException:
        kept = Path(tempfile.gettempdir()) / f"fleet-bench-logs-{int(time.time())}"
        shutil.copytree(tmp / "logs", kept, dirs_exist_ok=True)
        print(f"the deployment's logs: {kept}", file=sys.stderr)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(gpus, nodes, wall_s, cpu0, cpu1, busy_s, sizes0, sizes1, window, late, lag,
           quote_s, sample_s, setup_s, fleet) -> dict[str, Any]:  # fmt: skip
    gpu_hours = gpus * wall_s / S_PER_HOUR
    cpu = {name: cpu1[name] - cpu0[name] for name in cpu0}
    ours = sum(cpu.values())
    by_path: dict[str, list[float]] = {}
    for _, path, latency in window:
        by_path.setdefault(path, []).append(latency * MS_PER_S)
    growth = {t: sizes1.get(t, 0) - sizes0.get(t, 0) for t in sizes1}
    gpu_days = gpus * wall_s / S_PER_DAY
    return {
        "gpus": gpus,
        "nodes": nodes,
        "quote_s": quote_s,
        "sample_s": sample_s,
        "setup_s": round(setup_s, 1),
        "window_s": round(wall_s, 1),
        "quotes_due_per_s": round(nodes / quote_s, 2),
        "quotes_per_s": round(len(by_path.get("quote/", [])) / wall_s, 2),
        "rounds_late_p99_s": round(percentile(late, 0.99), 2),
        "cores": {name: round(v / wall_s, 3) for name, v in cpu.items()},
        "cpu_s_per_gpu_hour": {name: round(v / gpu_hours, 4) for name, v in cpu.items()},
        "path_cores": round(ours / wall_s, 3),
        "path_cpu_s_per_gpu_hour": round(ours / gpu_hours, 4),
        "rest_of_machine_cores": round((busy_s - ours) / wall_s, 3),
        "latency_ms": {
            path: {
                "n": len(values),
                "p50": round(percentile(values, 0.5), 1),
                "p99": round(percentile(values, 0.99), 1),
            }
            for path, values in sorted(by_path.items())
        },
        "outbox_lag": {k: round(v, 2) if isinstance(v, float) else v for k, v in lag.items()},
        "db_growth_bytes_per_gpu_day": {
            t: round(b / gpu_days) for t, b in sorted(growth.items(), key=lambda kv: -kv[1]) if b
        },
        "db_growth_total_per_gpu_day": round(sum(growth.values()) / gpu_days),
        "failures": sum(len(n.failures) for n in fleet.nodes),
        "failure_examples": [f for n in fleet.nodes for f in n.failures][:3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", default="1000,5000,10000")
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--warm-s", type=float, default=90)
    parser.add_argument("--quote-s", type=int, default=60)
    parser.add_argument("--sample-s", type=int, default=10)
    parser.add_argument("--swtpm", type=int, default=2)
    parser.add_argument("--check", action="store_true")
    parser.add_argument(
        "--server",
        default=DEFAULT_SERVER,
        help="a bench/web_bench.py layout: wsgiN, asgiN, gthreadN (N workers)",
    )
    args = parser.parse_args()
    for gpus in (int(g) for g in args.gpus.split(",")):
        result = run_level(gpus, args.seconds, args.warm_s, args.quote_s, args.sample_s,
                           args.swtpm, args.check, args.server)  # fmt: skip
        print(json.dumps(result, indent=1), flush=True)
        print_table(result)


def print_table(r: dict[str, Any]) -> None:
    print(f"\n{r['gpus']} GPUs ({r['nodes']} nodes, server {r['server']}), "
          f"{r['window_s']} s measured, "
          f"quotes {r['quotes_per_s']}/s of {r['quotes_due_per_s']}/s due")  # fmt: skip
    print(f"{'process':22} {'cores':>7} {'CPU s per GPU-hour':>20}")
    for name, cores in r["cores"].items():
        print(f"{name:22} {cores:7.3f} {r['cpu_s_per_gpu_hour'][name]:20.4f}")
    print(f"{'whole path':22} {r['path_cores']:7.3f} {r['path_cpu_s_per_gpu_hour']:20.4f}")
    print(f"{'rest of machine':22} {r['rest_of_machine_cores']:7.3f}")
    for path, lat in r["latency_ms"].items():
        print(f"agent {path:16} n={lat['n']:6} p50 {lat['p50']:8.1f} ms  p99 {lat['p99']:8.1f} ms")
    lag = r["outbox_lag"]
    print(f"outbox lag p50 {lag['p50_s']} s, p99 {lag['p99_s']} s, pending {lag['pending']}")
    print(f"database growth {r['db_growth_total_per_gpu_day'] / 1e6:.2f} MB per GPU-day")


if __name__ == "__main__":
    main()
