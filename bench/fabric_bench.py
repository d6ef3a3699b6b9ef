"""Committed transactions per second and p50/p99 latency of the whole Fabric path through the
Python gateway client and, as the reference, the official Node client
`@hyperledger/fabric-gateway`: the same workload, the same gateway, the same run.

    python bench/fabric_bench.py --network /tmp/wl-bench --base-port 30000 \\
        [--levels 1,16,64,256] [--repeats 2] [--count N] [--out report.json]

brings the loopback network (3 Raft orderers, 2 organisations, TLS, AND endorsement) up in
ROOT itself, records the bring-up time, runs both clients at each level of transactions in
flight (alternating which goes first), samples the CPU time of every process of the path
(orderers, peers, chaincode servers, the clients) from /proc, names the one that used the
most, prints a table and a JSON report, and takes the network down again (`--keep-up`
leaves it). Without --network, both clients run once against the network FABRIC_* names:

    FABRIC_PEER_ENDPOINT=... FABRIC_TLS_CA=... FABRIC_MSP_ID=Org1MSP FABRIC_MSP_DIR=... \\
        python bench/fabric_bench.py --count 500 --concurrency 16

Each transaction registers a fresh node (a software AK made per run), so none conflicts.
`--plaintext ADDRESS` runs both clients without TLS against a bare gRPC address: for
checking the harness only, never a figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fabric_clients import (
    CLIENTS,
    DEFAULT_FN,
    Workload,
    approve_policy,
    default_template,
    identity_env,
    node_env,
)
from bench.proc_cpu import OTHERS, CpuMeter, children_cpu_s, self_cpu_s
from chaincode_client.fabric.client import FabricGatewayClient
from chaincode_client.fabric.config import FabricSettings
from chaincode_client.fabric.identity import load_msp
from chaincode_client.fabric_network import processes
from chaincode_client.fabric_network.configs import NODE_ENV_DEFAULTS
from chaincode_client.fabric_network.layout import Layout
from chaincode_client.fabric_network.network import Network

SINGLE_COUNT = 500
DEFAULT_BENCH_BASE_PORT = 30000
# Transactions per run at each level: enough for several blocks at the level's rate.
DEFAULT_COUNTS = {1: 40, 16: 400, 64: 1000, 256: 2000}
PER_LEVEL_MIN_ROUNDS = 4  # a level not in DEFAULT_COUNTS runs this many rounds of its size
WARMUP_COUNT = 20  # transactions through each client before measuring (connections, caches)
WARMUP_LEVEL = 4
CHANNEL = CHAINCODE = "wattlease"
ROLES = (("orderer", "orderers"), ("peer", "peers"), ("ccaas", "chaincode servers"))


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def single(args: argparse.Namespace) -> int:
    """Both clients once, at one concurrency, against the network FABRIC_* names (or a bare
    plaintext address, to check the harness). The default workload registers under the PCR
    policy POLICY_ID, which two organisations' admins must have approved on that channel
    (`approve_policy`; the --network mode does it itself)."""
    if args.plaintext:
        msp_id, msp_dir = args.msp_id, Path(args.msp_dir)
        identity, signer = load_msp(msp_dir, msp_id)
        channel = grpc.insecure_channel(args.plaintext)
        client = FabricGatewayClient(channel, identity, signer, CHANNEL, CHAINCODE)
        env = {"PLAINTEXT": "1", "GATEWAY_ADDRESS": args.plaintext}
        env.update(CHANNEL=CHANNEL, CHAINCODE=CHAINCODE, **identity_env(msp_id, msp_dir))
    else:
        settings = FabricSettings.from_env()
        msp_id, env = settings.msp_id, node_env(settings)
        client = FabricGatewayClient.from_settings(settings)
    workload = Workload(args.fn, args.template or default_template(msp_id), env)
    count = args.count or SINGLE_COUNT
    print(f"bench: {count} x {args.fn}, concurrency {args.concurrency}", file=sys.stderr)
    try:
        python = workload.run("python", client, count, args.concurrency)
        print(f"python: {python}", file=sys.stderr)
    finally:
        client.close()
    node = workload.run("node", client, count, args.concurrency)
    print(f"node:   {node}", file=sys.stderr)
    report = {
        "python": python,
        "node": node,
        "python_over_node": ratio(python["tx_per_s"], node["tx_per_s"]),
        "plaintext_harness_check": bool(args.plaintext),
    }
    print(json.dumps(report, indent=2))
    return 0


def level_count(level: int, count: int) -> int:
    return count or DEFAULT_COUNTS.get(level, PER_LEVEL_MIN_ROUNDS * level)


def role(process: str) -> str:
    """orderer0 -> orderers, peer0.org1 -> peers, ccaas.org2 -> chaincode servers."""
    for prefix, name in ROLES:
        if process.startswith(prefix):
            return name
    return process


def measure(
    workload: Workload, client: FabricGatewayClient, name: str, level: int, count: int, pids: dict
) -> dict:
    """One run of one client, with the CPU time of every process of the path over it: per
    process, per role (the three orderers, the two peers, the two chaincode servers, the
    client), and which role used the most CPU per committed transaction."""
    reader = self_cpu_s if name == "python" else children_cpu_s
    meter = CpuMeter(pids, {f"client ({name})": reader})
    meter.start()
    result = workload.run(name, client, count, level)
    cpu = result["cpu"] = meter.stop()
    per_role: dict[str, float] = {}
    for process, seconds in cpu["cpu_s"].items():
        if process != OTHERS:
            per_role[role(process)] = per_role.get(role(process), 0.0) + seconds
    ms = {k: round(1000 * v / result["committed"], 2) for k, v in per_role.items()}
    result["cpu_ms_per_tx_by_role"] = dict(sorted(ms.items(), key=lambda kv: -kv[1]))
    result["cpu_ms_per_tx"] = round(sum(ms.values()), 2)
    result["limiting_role"] = next(iter(result["cpu_ms_per_tx_by_role"]))
    top = cpu["top_process"]
    print(
        f"  {name:6} x{level:<4} {result['tx_per_s']:8.1f} tx/s  p50 {result['p50_ms']:7.1f} ms"
        f"  p99 {result['p99_ms']:7.1f} ms  {result['cpu_ms_per_tx']:5.2f} CPU ms/tx (most: "
        f"{result['limiting_role']}; busiest process {top} {cpu['cores'][top]:.2f} cores; "
        f"machine {cpu['machine_cores_busy']} cores busy)",
        file=sys.stderr,
    )
    return result


def level_summary(level: int, runs: list[dict]) -> dict:
    out: dict[str, object] = {"level": level, "runs": runs}
    for name in CLIENTS:
        rates = [r["tx_per_s"] for r in runs if r["client"] == name]
        out[name] = {
            "best_tx_per_s": max(rates),
            "median_tx_per_s": round(statistics.median(rates), 2),
            "best_p50_ms": min(r["p50_ms"] for r in runs if r["client"] == name),
            "best_p99_ms": min(r["p99_ms"] for r in runs if r["client"] == name),
        }
    py, nd = out["python"], out["node"]
    out["python_over_node_best"] = ratio(py["best_tx_per_s"], nd["best_tx_per_s"])  # type: ignore[index]
    out["python_over_node_median"] = ratio(py["median_tx_per_s"], nd["median_tx_per_s"])  # type: ignore[index]
    return out


def levels(args: argparse.Namespace) -> int:
    """Bring the network up in ROOT, run both clients at every level, report, take it down."""
    layout = Layout(Path(args.network).resolve(), base_port=args.base_port)
    network = Network.create(layout, log=lambda line: print(f"fabric: {line}", file=sys.stderr))
    fresh = not layout.state_file.exists()
    report: dict[str, object] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at start",
        "env_of_nodes_started": {
            name: os.environ.get(name, default) for name, default in NODE_ENV_DEFAULTS.items()
        },
    }
    try:
        report["bring_up_s"] = round(network.up(), 1)
        report["bring_up_fresh_folder"] = fresh
        pids = {n: processes.running_pid(layout, n) for n in layout.process_names()}
        settings = FabricSettings.from_env(layout.client_env(layout.orgs[0].msp_id))
        admins = [
            FabricGatewayClient.from_env(layout.client_env(o.msp_id, "Admin")) for o in layout.orgs
        ]
        try:
            approve_policy(admins[0], admins[1])  # the default workload's PCR policy
        finally:
            for admin in admins:
                admin.close()
        workload = Workload(args.fn, args.template or default_template(settings.msp_id), {})
        workload.node_env = node_env(settings)
        client = FabricGatewayClient.from_settings(settings)
        try:
            for name in CLIENTS if args.warmup else ():
                workload.run(name, client, args.warmup, min(args.warmup, WARMUP_LEVEL))
            results = []
            for level in [int(v) for v in args.levels.split(",")]:
                runs = []
                for repeat in range(args.repeats):
                    order = CLIENTS if repeat % 2 == 0 else CLIENTS[::-1]
                    count = level_count(level, args.count)
                    runs += [measure(workload, client, n, level, count, pids) for n in order]
                results.append(level_summary(level, runs))
        finally:
            client.close()
        report["levels"] = results
    finally:
        if not args.keep_up:
            busy = network.down()
            if busy:
                print(f"fabric: ports still open after down: {busy}", file=sys.stderr)
    print(table(report), file=sys.stderr)
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


def table(report: dict) -> str:
    """The report as a Markdown table: each client's best and median rate at each level; the
    best run's latency, CPU per transaction by role and busiest process."""
    lines = [
        f"bring-up {report['bring_up_s']} s; {report['machine']}",
        "| in flight | client | best tx/s | median tx/s | p50 ms | p99 ms "
        "| CPU ms/tx: peers / chaincode servers / orderers / client "
        "| busiest process | rest of machine |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for level in report["levels"]:
        for name in CLIENTS:
            s = level[name]
            best = max((r for r in level["runs"] if r["client"] == name), key=rate)
            by_role = best["cpu_ms_per_tx_by_role"]
            parts = [by_role.get(k, 0.0) for k in ("peers", "chaincode servers", "orderers")]
            parts.append(by_role.get(f"client ({name})", 0.0))
            top, cores = best["cpu"]["top_process"], best["cpu"]["cores"]
            lines.append(
                f"| {level['level']} | {name} | {s['best_tx_per_s']} | {s['median_tx_per_s']} "
                f"| {best['p50_ms']} | {best['p99_ms']} "
                f"| {best['cpu_ms_per_tx']}: {' / '.join(map(str, parts))} "
                f"| {top} {cores[top]} cores | {cores.get(OTHERS, 0.0)} cores |"
            )
        lines.append(
            f"| | python / node | {level['python_over_node_best']} (best) "
            f"| {level['python_over_node_median']} (median) | | | | | |"
        )
    return "\n".join(lines)


def rate(run: dict) -> float:
    return float(run["tx_per_s"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=0, help="transactions per run")
    parser.add_argument("--concurrency", type=int, default=16, help="without --network")
    parser.add_argument("--fn", default=DEFAULT_FN)
    parser.add_argument("--template", default=None, help="argument with {i}; default: a node")
    parser.add_argument("--plaintext", metavar="ADDRESS", help="harness check only, no TLS")
    parser.add_argument("--msp-id", help="with --plaintext")
    parser.add_argument("--msp-dir", help="with --plaintext")
    parser.add_argument("--network", metavar="ROOT", help="bring a network up here, run levels")
    parser.add_argument("--base-port", type=int, default=DEFAULT_BENCH_BASE_PORT)
    parser.add_argument("--levels", default=",".join(map(str, DEFAULT_COUNTS)))
    parser.add_argument("--repeats", type=int, default=2, help="runs of each client per level")
    parser.add_argument("--warmup", type=int, default=WARMUP_COUNT, help="unmeasured, per client")
    parser.add_argument("--keep-up", action="store_true", help="leave the network running")
    parser.add_argument("--out", help="also write the JSON report to this file")
    args = parser.parse_args(argv)
    return levels(args) if args.network else single(args)


if __name__ == "__main__":
    sys.exit(main())
