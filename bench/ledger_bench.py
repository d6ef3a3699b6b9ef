"""Committed CreateLease (or Settle) transactions per second on the embedded ledger, 2-org
endorsement.

    python bench/ledger_bench.py --leases 12000 --threads 2 --in-flight 128 --peer-processes
    python bench/ledger_bench.py --fn settle   # one bill line per lease, the contract's checks

Sets up a real swtpm, registers nodes of 64 GPUs each, records one real quote per node, then
client threads submit CreateLease for distinct GPUs (every one signed by the client, checked,
simulated and signed by each org's peer on its own, checked to agree, ordered, validated,
committed).

The load is Caliper's "fixed-load" shape: each client thread keeps --in-flight transactions
outstanding (submit_async, then the oldest receipt when the window is full), so blocks fill
while earlier ones commit. --in-flight 1 is the old one-transaction-at-a-time client.
Latency is from building the proposal to holding the commit receipt. Prints throughput,
latency percentiles and where the time went.
"""

from __future__ import annotations

import argparse
import collections
import json
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chaincode_client.embedded import EmbeddedClient
from ledger.audit.receipt import export_receipt, verify_receipt
from ledger.engine import EmbeddedLedger
from tests.ledger.conftest import swtpm_node
from tests.ledger.helpers import (
    H100,
    approve_on_engine,
    attest,
    batches_of,
    counter_readings,
    lease_request,
    lease_terms,
    now_ms,
    org_roots,
    pcr_policy,
    register_node,
    settle_request,
)

GPUS_PER_NODE = 64
MAX_AGE_S = 86_400  # attestations stay good for the whole run
HOUR_MS = 3_600_000
LINE_MJ = 300 * HOUR_MS  # a settled line's energy: an hour at 300 W


def setup(
    ledger: EmbeddedLedger, leases: int, workdir: Path, start_ms: int
) -> tuple[list[str], dict]:
    nodes = (leases + GPUS_PER_NODE - 1) // GPUS_PER_NODE
    with swtpm_node(workdir / "swtpm", aks=nodes) as node_tpm:  # one AK, one node
        client = EmbeddedClient(ledger, ledger.enroll("Org1MSP", "setup"))
        policy = approve_on_engine(ledger, "bench", pcr_policy(node_tpm.golden, MAX_AGE_S))
        gpus, att_of = [], {}
        for n in range(nodes):
            node_id = f"bench-n{n}"
            inventory = [(f"GPU-{n}-{g}", H100) for g in range(GPUS_PER_NODE)]
            register_node(client, node_tpm, node_id, n, inventory, policy_id=policy)
            # one batch of readings per GPU, bound into the quote: what each Settle cites
            batch_rows = line_readings([uuid for uuid, _ in inventory], start_ms)
            att_id = attest(client, node_tpm, node_id, n, batch_rows)["attestation_id"]
            for uuid, _ in inventory:
                gpus.append(uuid)
                att_of[uuid] = att_id
            print(f"  node {n + 1}/{nodes} registered and attested", end="\r", file=sys.stderr)
        print(file=sys.stderr)
        return gpus[:leases], att_of


def create_call(uuid: str, *, att_of: dict, start_ms: int) -> tuple[str, str]:
    """CreateLease of one lease on GPU `uuid`, from `start_ms`, relying on its node's quote."""
    return "CreateLease", lease_request(f"L-{uuid}", [uuid], [att_of[uuid]], start_ms=start_ms)


def line_readings(gpus: list[str], start_ms: int) -> dict[str, str]:
    """Each GPU's readings over its lease's first hour: its counter rising by LINE_MJ."""
    return counter_readings(gpus, [(start_ms, 0), (start_ms + HOUR_MS, LINE_MJ)])


def settle_call(uuid: str, *, start_ms: int) -> tuple[str, str]:
    """Settle of that lease's one bill line: its first hour at 300 W, final, citing the GPU's
    attested batch (whose counters the contract measures the line's energy from)."""
    terms = lease_terms([uuid], start_ms=start_ms)
    end = start_ms + HOUR_MS
    batches = batches_of(line_readings([uuid], start_ms))
    line = settle_request(
        f"L-{uuid}", 0, terms, start_ms, end, LINE_MJ, final=True, batches=batches
    )
    return "Settle", json.dumps(line)


def submit_all(
    args: argparse.Namespace,
    clients: list[EmbeddedClient],
    gpus: list[str],
    make: Callable[[str], tuple[str, str]],
) -> tuple[list[float], float, list[str]]:
    """Submit make(uuid) for every GPU from the client threads, --in-flight outstanding each;
    the sorted latencies, the wall time and the failures."""
    latencies: list[float] = []
    lock = threading.Lock()
    failures: list[str] = []

    def worker(index: int) -> None:
        window: collections.deque = collections.deque()
        local = []

        def settle_oldest() -> None:
            t0, pending = window.popleft()
            try:
                pending.receipt()
            except Exception as exc:  # counted, reported; a bench must not hide failures
                failures.append(repr(exc))
                return
            local.append(time.perf_counter() - t0)

        for uuid in gpus[index :: args.threads]:
            t0 = time.perf_counter()
            try:
                fn, request = make(uuid)
                window.append((t0, clients[index].submit_async(fn, request)))
            except Exception as exc:
                failures.append(repr(exc))
            if len(window) >= args.in_flight:
                settle_oldest()
        while window:
            settle_oldest()
        with lock:
            latencies.extend(local)

    print(f"submitting {len(gpus)} from {args.threads} threads ...", file=sys.stderr)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.threads)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(latencies), time.perf_counter() - start, failures


def run(args: argparse.Namespace, workdir: Path) -> dict:
    ledger = EmbeddedLedger.open(
        workdir / "ledger.sqlite",
        block_size=args.block_size,
        block_timeout_s=args.block_timeout,
        validation_workers=args.validation_workers,
        peer_processes=args.peer_processes,
    )
    print(f"setting up {args.leases} GPUs in {workdir} ...", file=sys.stderr)
    start_ms = now_ms() - 2 * HOUR_MS  # settled lines end an hour before the ledger's clock
    gpus, att_of = setup(ledger, args.leases, workdir, start_ms)
    clients = [
        EmbeddedClient(ledger, ledger.enroll("Org1MSP", f"c{i}")) for i in range(args.threads)
    ]
    for endorser in ledger.endorsers:
        endorser.timings.update(dict.fromkeys(endorser.timings, 0.0))
    for key in ledger.timings:
        ledger.timings[key] = 0.0
    create = partial(create_call, att_of=att_of, start_ms=start_ms)
    settle = partial(settle_call, start_ms=start_ms)

    if args.fn == "settle":
        print(f"creating {len(gpus)} leases to settle (not timed) ...", file=sys.stderr)
        _, _, untimed_failures = submit_all(args, clients, gpus, create)
        assert not untimed_failures, untimed_failures[0]
        for endorser in ledger.endorsers:
            endorser.timings.update(dict.fromkeys(endorser.timings, 0.0))
        for key in ledger.timings:
            ledger.timings[key] = 0.0
    cpu_start = time.process_time()
    latencies, elapsed, failures = submit_all(
        args, clients, gpus, settle if args.fn == "settle" else create
    )
    cpu = time.process_time() - cpu_start
    blocks = ledger.timings["blocks"]
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    ledger.close()  # joins the peer/validator processes, so their CPU time is counted
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    worker_cpu = (children.ru_utime + children.ru_stime) - (
        children_before.ru_utime + children_before.ru_stime
    )
    export_start = time.perf_counter()
    receipt = export_receipt(workdir / "ledger.sqlite", f"L-{gpus[-1]}")
    export_ms = 1000 * (time.perf_counter() - export_start)
    roots = org_roots(workdir / "ledger.sqlite")
    assert verify_receipt(receipt, roots) == [], (
        "the receipt of a benchmark lease does not re-check"
    )
    result = {
        "function": "Settle" if args.fn == "settle" else "CreateLease",
        "committed": len(latencies),
        "failed": len(failures),
        "threads": args.threads,
        "in_flight_per_thread": args.in_flight,
        "block_size": args.block_size,
        "block_timeout_s": args.block_timeout,
        "validation_workers": args.validation_workers,
        "peer_processes": args.peer_processes,
        "switch_interval_ms": args.switch_interval_ms,
        "elapsed_s": round(elapsed, 3),
        "tps": round(len(latencies) / elapsed, 1),
        "p50_ms": round(1000 * statistics.median(latencies), 2),
        "p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))], 2),
        "blocks": int(blocks),
        "receipt_export_ms": round(export_ms, 1),  # one lease's receipt from the whole chain
        "process_cpu_us_per_tx": round(cpu / max(1, len(latencies)) * 1e6, 1),
        "process_cpu_utilisation": round(cpu / elapsed, 2),
        # peer/validator processes, over their whole life (setup's few transactions too)
        "worker_processes_cpu_us_per_tx": round(worker_cpu / max(1, len(latencies)) * 1e6, 1),
        "worker_processes_cpu_utilisation": round(worker_cpu / elapsed, 2),
        "cpu_s": {
            **{  # in-process peers only (peer processes keep their own)
                f"{e.mspid}_{k}": round(v, 3)
                for e in ledger.endorsers
                for k, v in e.timings.items()
            },
            "committer_validate": round(ledger.timings["validate"], 3),
            "committer_sqlite": round(ledger.timings["commit_sqlite"], 3),
        },
    }
    if failures:
        result["first_failure"] = failures[0]
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--leases", type=int, default=12000)
    parser.add_argument(
        "--fn",
        choices=("create", "settle"),
        default="create",
        help="time CreateLease (default), or Settle of one bill line per lease",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--in-flight", type=int, default=128, help="outstanding per thread")
    parser.add_argument("--block-size", type=int, default=250)
    parser.add_argument("--block-timeout", type=float, default=0.02)
    parser.add_argument("--validation-workers", type=int, default=0)
    parser.add_argument(
        "--peer-processes",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="each org's endorsing peer in a process of its own (default on)",
    )
    parser.add_argument("--switch-interval-ms", type=float, default=5.0)
    parser.add_argument("--keep", action="store_true", help="keep the ledger file afterwards")
    args = parser.parse_args()
    sys.setswitchinterval(args.switch_interval_ms / 1000)  # CPython's default is 5 ms
    workdir = Path(tempfile.mkdtemp(prefix="ledger-bench-"))
    try:
        result = run(args, workdir)
    except Exception as exc:  # e.g. swtpm could not start: say so on stdout, exit non-zero
        print(json.dumps({"error": repr(exc)}))
        raise SystemExit(1) from exc
    finally:
        if args.keep:
            print(f"ledger kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
