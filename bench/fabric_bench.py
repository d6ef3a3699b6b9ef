"""Committed transactions per second and p50/p99 latency through the Python gateway client
and, as the reference, the official Node client `@hyperledger/fabric-gateway`, with the same
workload against the same gateway in the same run.

    FABRIC_PEER_ENDPOINT=... FABRIC_TLS_CA=... FABRIC_MSP_ID=Org1MSP FABRIC_MSP_DIR=... \
        python bench/fabric_bench.py --count 500 --concurrency 16

Each transaction is `FN(ARG_TEMPLATE with {i} replaced)`; the default registers a fresh node
per transaction, so every one writes new keys and none conflicts. Prints a JSON summary with
the Python/Node throughput ratio (target >= 0.9). `--plaintext ADDRESS` runs both clients
without TLS against a bare gRPC address: for checking the harness only, never a figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chaincode_client.fabric.client import FabricGatewayClient
from chaincode_client.fabric.config import FabricSettings
from chaincode_client.fabric.identity import load_msp

NODE_DIR = Path(__file__).resolve().parent / "fabric-node"
NODE_TIMEOUT_S = 1800
DEFAULT_FN = "RegisterNode"
DEFAULT_TEMPLATE = json.dumps(
    {
        "node_id": "bench-RUN-{i}",
        "org": "MSPID",
        "ak_public": "AAE=",
        "gpus": [{"uuid": "GPU-RUN-{i}", "generation": "H100"}],
        "pcr_policy": {"pcrs": {"sha256": {"0": "00" * 32}}, "max_age_s": 600},
    }
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(name: str, committed: int, seconds: float, latencies_ms: list[float]) -> dict:
    return {
        "client": name,
        "committed": committed,
        "seconds": round(seconds, 3),
        "tx_per_s": round(committed / seconds, 2) if seconds else 0.0,
        "p50_ms": round(percentile(latencies_ms, 0.50), 2),
        "p99_ms": round(percentile(latencies_ms, 0.99), 2),
        "mean_ms": round(statistics.fmean(latencies_ms), 2),
    }


def run_python(
    client: FabricGatewayClient, fn: str, template: str, count: int, concurrency: int
) -> dict:
    latencies: list[float] = []

    def one(i: int) -> None:
        started = time.perf_counter()
        client.submit(fn, template.replace("{i}", str(i)))
        latencies.append((time.perf_counter() - started) * 1000)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(count)))
    return summary("python", len(latencies), time.perf_counter() - t0, latencies)


def run_node(env: dict[str, str]) -> dict:
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules").is_dir():
        raise SystemExit(f"node and `npm ci --prefix {NODE_DIR}` are needed for the reference")
    out = subprocess.run(
        [node, str(NODE_DIR / "bench.js")],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_S,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"node bench failed: {out.stderr[-2000:]}")
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return summary("node", data["committed"], data["seconds"], data["latencies_ms"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--fn", default=DEFAULT_FN)
    parser.add_argument("--template", default=None, help="argument with {i}; default: a node")
    parser.add_argument("--plaintext", metavar="ADDRESS", help="harness check only, no TLS")
    parser.add_argument("--msp-id", help="with --plaintext")
    parser.add_argument("--msp-dir", help="with --plaintext")
    args = parser.parse_args(argv)

    if args.plaintext:
        msp_id, msp_dir = args.msp_id, Path(args.msp_dir)
        channel_name = chaincode = "wattlease"
        identity, signer = load_msp(msp_dir, msp_id)
        client = FabricGatewayClient(
            grpc.insecure_channel(args.plaintext), identity, signer, channel_name, chaincode
        )
        node_env = {"PLAINTEXT": "1", "GATEWAY_ADDRESS": args.plaintext}
    else:
        settings = FabricSettings.from_env()
        msp_id, msp_dir = settings.msp_id, settings.msp_dir
        channel_name, chaincode = settings.channel, settings.chaincode
        client = FabricGatewayClient.from_settings(settings)
        node_env = {
            "GATEWAY_ADDRESS": settings.endpoint,
            "TLS_CA_FILE": str(settings.tls_ca),
            "HOST_ALIAS": settings.host_alias or "",
        }
    run_id = uuid.uuid4().hex[:8]
    template = (args.template or DEFAULT_TEMPLATE).replace("MSPID", msp_id)
    certs = sorted((msp_dir / "signcerts").iterdir())
    keys = sorted((msp_dir / "keystore").iterdir())
    node_env.update(
        MSP_ID=msp_id,
        CERT_PEM_FILE=str(certs[0]),
        KEY_PEM_FILE=str(keys[0]),
        CHANNEL=channel_name,
        CHAINCODE=chaincode,
        FN=args.fn,
        ARG_TEMPLATE=template.replace("RUN", f"{run_id}n"),
        COUNT=str(args.count),
        CONCURRENCY=str(args.concurrency),
    )
    print(f"bench: {args.count} x {args.fn}, concurrency {args.concurrency}", file=sys.stderr)
    try:
        python = run_python(
            client, args.fn, template.replace("RUN", f"{run_id}p"), args.count, args.concurrency
        )
    finally:
        client.close()
    print(f"python: {python}", file=sys.stderr)
    node = run_node(node_env)
    print(f"node:   {node}", file=sys.stderr)
    ratio = round(python["tx_per_s"] / node["tx_per_s"], 3) if node["tx_per_s"] else None
    print(
        json.dumps(
            {
                "python": python,
                "node": node,
                "python_over_node": ratio,
                "plaintext_harness_check": bool(args.plaintext),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
