"""The bench's two clients and their common workload: the Python gateway client in this
process, the official Node client `@hyperledger/fabric-gateway` (bench/fabric-node/bench.js)
in a child process, both sending the same transactions to the same gateway.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from attest.public import software_ak_public
from chaincode_client.fabric.client import FabricGatewayClient
from chaincode_client.fabric.config import FabricSettings
from chaincode_client.governance import decide
from chaincode_client.interface import LedgerClient

NODE_DIR = Path(__file__).resolve().parent / "fabric-node"
NODE_TIMEOUT_S = 1800
DEFAULT_FN = "RegisterNode"
POLICY_ID = "bench-zero"  # the PCR policy the default workload registers under
POLICY = {"pcrs": {"sha256": {"0": "00" * 32}}, "max_age_s": 600}
CLIENTS = ("python", "node")


def default_template(msp_id: str) -> str:
    """A RegisterNode request the contract accepts: one GPU, the PCR policy POLICY_ID
    (approved first: `approve_policy`) and an AK of its own (`{ak}`: the contract gives an AK
    to one node only); `RUN` and `{i}` make every transaction's node and GPU new, so each
    writes fresh keys and none conflicts."""
    return json.dumps(
        {
            "node_id": "bench-RUN-{i}",
            "org": msp_id,
            "ak_public": "{ak}",
            "gpus": [{"uuid": "GPU-RUN-{i}", "generation": "H100"}],
            "pcr_policy_id": POLICY_ID,
        }
    )


def software_aks(count: int) -> list[str]:
    """`count` software AKs (restricted-signing P-256 TPM2B_PUBLIC, base64), made before the
    clock starts, one for each transaction's `{ak}`."""
    return [base64.b64encode(software_ak_public()).decode() for _ in range(count)]


def fill(template: str, i: int, aks: list[str]) -> str:
    """Transaction i's argument: `{i}` is its number, `{ak}` (if the template has one) its AK."""
    arg = template.replace("{i}", str(i))
    return arg.replace("{ak}", aks[i]) if aks else arg


def approve_policy(proposer: LedgerClient, approver: LedgerClient) -> None:
    """Two organisations' admins put the bench's PCR policy in force (once per channel)."""
    decide(proposer, approver, "pcr_policy", POLICY_ID, POLICY)


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
    client: FabricGatewayClient,
    fn: str,
    template: str,
    count: int,
    concurrency: int,
    aks: list[str],
) -> dict:
    latencies: list[float] = []

    def one(i: int) -> None:
        started = time.perf_counter()
        client.submit(fn, fill(template, i, aks))
        latencies.append((time.perf_counter() - started) * 1000)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(count)))
    return summary("python", len(latencies), time.perf_counter() - t0, latencies)


def run_node(env: dict[str, str]) -> dict:
    """The reference client in a child process (its CPU time is this process's children's)."""
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


def identity_env(msp_id: str, msp_dir: Path) -> dict[str, str]:
    certs = sorted((msp_dir / "signcerts").iterdir())
    keys = sorted((msp_dir / "keystore").iterdir())
    return {"MSP_ID": msp_id, "CERT_PEM_FILE": str(certs[0]), "KEY_PEM_FILE": str(keys[0])}


def node_env(settings: FabricSettings) -> dict[str, str]:
    """The Node client's settings: the gateway and identity the Python client uses."""
    return {
        "GATEWAY_ADDRESS": settings.endpoint,
        "TLS_CA_FILE": str(settings.tls_ca),
        "HOST_ALIAS": settings.host_alias or "",
        **identity_env(settings.msp_id, settings.msp_dir),
        "CHANNEL": settings.channel,
        "CHAINCODE": settings.chaincode,
    }


@dataclass
class Workload:
    """What both clients send: `fn` with `template`; `RUN` is replaced by a new id on every
    run, `{i}` by the transaction's number and `{ak}` by a fresh AK (the same for both
    clients: Node reads them from AKS_FILE, one a line)."""

    fn: str
    template: str
    node_env: dict[str, str]

    def run(self, client_name: str, client: FabricGatewayClient, count: int, level: int) -> dict:
        template = self.template.replace("RUN", uuid.uuid4().hex[:10])
        aks = software_aks(count) if "{ak}" in template else []
        if client_name == "python":
            return run_python(client, self.fn, template, count, level, aks)
        with tempfile.NamedTemporaryFile("w", suffix=".aks") as aks_file:
            aks_file.write("\n".join(aks))
            aks_file.flush()
            env = {"FN": self.fn, "ARG_TEMPLATE": template, "COUNT": str(count)}
            env["AKS_FILE"] = aks_file.name
            return run_node({**self.node_env, **env, "CONCURRENCY": str(level)})
