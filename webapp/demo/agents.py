"""The demo's node agents: one swtpm per simulated node, each with the real agent code
talking HTTP to the demo server — enrol (EK certificate chain, credential activation), then
a fresh quote every ATTESTATION_INTERVAL_S, bound to the readings of the node's GPUs since
its previous one (docs/billing.md, "Attested telemetry"; the demo's counters are the trace
the demo loop replays). Each agent reports the GPUs the demo simulates for its node (the
replayed trace's GPUs; NVML on a real host). One node has its PCR 7 extended after its first
good quote (as if Secure Boot had been switched off), so the dashboard shows it red."""

from __future__ import annotations

import hashlib
import logging
import shutil
import signal
import threading
import time
import urllib.request
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections

from attest.agent.http import BAD_REQUEST, AgentApi, AgentApiError, attest_once, enrol
from attest.agent.tpm import Agent
from attest.readings import row_text
from attest.swtpm import LocalCA, Swtpm, start_node_tpm
from scheduler.telemetry.sample import CSV_FIELDS
from webapp.attestation import actions as attestation_actions
from webapp.fleet import rate_card
from webapp.fleet.models import Node, PcrPolicy, TelemetrySample

log = logging.getLogger("wattlease.demo.agents")

SERVER_WAIT_S = 60.0
TAMPERED_NODE_INDEX = -1  # the last demo node
TAMPER_EVENT = b"demo: Secure Boot disabled"
POLICY_PCRS = "sha256:0,2,7"
STOP_WAIT_S = 3.0
MAX_READINGS_PER_QUOTE = 10_000  # ~600 KB, under the agent API's limit; the rest goes next


def simulated_inventory(node: Node) -> list[dict[str, str]]:
    """What NVML would report for the node's simulated GPUs: uuid, name and serial."""
    catalogue = rate_card.in_force().catalogue  # the names the ledger checks enrolment against
    return [
        {
            "uuid": gpu.uuid,
            "name": catalogue.get(gpu.generation.catalogue_id).nvml_names[0],
            "serial": str(int(hashlib.sha256(gpu.uuid.encode()).hexdigest()[:12], 16)).zfill(15),
        }
        for gpu in node.gpus.select_related("generation").order_by("index")
    ]


def signals_to_main_thread() -> None:
    """Block SIGINT/SIGTERM in this thread, so the kernel delivers them to the main thread,
    whose event loop would otherwise not notice a signal caught by a thread in C code."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})


class DemoAgents:
    def __init__(self, data_dir: Path, server: str, interval_s: float) -> None:
        self.root = Path(data_dir) / "tpm"
        self.server = server
        self.interval_s = interval_s
        self.tpms: dict[str, Swtpm] = {}
        self.threads: list[threading.Thread] = []
        self.stop_event = threading.Event()

    def prepare(self, nodes: list[Node], policy: PcrPolicy, progress=print) -> None:
        """Start the swtpms, trust their EK CA (TPM_EK_CA_DIR) and record the golden values
        from the first node."""
        ca = LocalCA(self.root / "ca")
        for node in nodes:
            progress(f"  starting swtpm for {node.name}…")
            self.tpms[node.name] = start_node_tpm(self.root / node.name, ca)
        # swtpm_localca creates its CA with the first EK certificate; trust it from now on
        ca_dir = Path(settings.TPM_EK_CA_DIR)
        ca_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(ca.root_cert_file, ca_dir / "demo-swtpm-root.pem")
        shutil.copy(ca.issuer_cert_file, ca_dir / "demo-swtpm-issuer.pem")
        self._record_golden_values(policy, nodes[0])

    def launch(self, nodes: list[Node]) -> None:
        """One agent thread per node: enrol, then attest on a schedule."""
        for index, node in enumerate(nodes):
            token = attestation_actions.issue_node_credential(node, actor="demo")
            tamper = index == len(nodes) + TAMPERED_NODE_INDEX
            thread = threading.Thread(
                target=self._agent,
                args=(node.name, token, simulated_inventory(node), tamper),
                daemon=True,
                name=f"agent-{node.name}",
            )
            self.threads.append(thread)
            thread.start()

    def _record_golden_values(self, policy: PcrPolicy, reference: Node) -> None:
        """Golden values come from a reference machine, as an operator would take them."""
        with Agent(self.tpms[reference.name].tcti) as agent:
            values = agent.read_pcrs(POLICY_PCRS)["sha256"]
        policy.pcrs = {"sha256": {str(i): v.hex() for i, v in values.items()}}
        policy.save()

    def _wait_for_server(self) -> bool:
        deadline = time.monotonic() + SERVER_WAIT_S
        while time.monotonic() < deadline and not self.stop_event.is_set():
            try:
                urllib.request.urlopen(self.server + "/admin/login/", timeout=2).close()
                return True
            except OSError:
                self.stop_event.wait(0.5)
        return False

    def _agent(self, node: str, token: str, inventory: list[dict[str, str]], tamper: bool) -> None:
        signals_to_main_thread()
        if not self._wait_for_server():
            log.error("agent of %s: server did not come up", node)
            return
        api = AgentApi(self.server, token)
        read_from_ms = time.time_ns() // 1_000_000  # the history before the demo is not billed
        try:
            with Agent(self.tpms[node].tcti) as agent:
                ak = enrol(agent, api, inventory=inventory)
                while not self.stop_event.is_set():
                    try:
                        readings, last_ms = read_counters(node, read_from_ms)
                        close_old_connections()  # this thread's, between rounds
                        verdict = attest_once(agent, api, ak, readings)
                        read_from_ms = last_ms
                        if tamper and verdict.get("valid"):
                            agent.extend_pcr(7, TAMPER_EVENT)
                    except (AgentApiError, OSError) as exc:
                        if isinstance(exc, AgentApiError) and exc.status == BAD_REQUEST:
                            read_from_ms = last_ms  # readings refused: never sent again
                        if self.stop_event.is_set():  # the server went first: a round cut short
                            break
                        log.warning("agent of %s: %s", node, exc)
                    self.stop_event.wait(self.interval_s)
        except Exception:
            log.exception("agent of %s stopped", node)

    def stop(self) -> None:
        """Stop promptly: agents are daemon threads; one stuck in an HTTP call to the
        server that is shutting down is not waited for beyond STOP_WAIT_S."""
        self.stop_event.set()
        deadline = time.monotonic() + STOP_WAIT_S
        for thread in self.threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        for tpm in self.tpms.values():
            tpm.stop()


def read_counters(node: str, after_ms: int) -> tuple[str, int]:
    """The demo node's energy counters: the readings of its GPUs that the demo loop replayed
    after `after_ms`, canonical CSV rows in time order, and the newest one's time."""
    rows = list(
        TelemetrySample.objects.filter(gpu__node__name=node, t_ms__gt=after_ms)
        .order_by("t_ms")
        .values_list(*("gpu__uuid" if f == "gpu" else f for f in CSV_FIELDS))[
            :MAX_READINGS_PER_QUOTE
        ]
    )
    return "".join(row_text(r) + "\n" for r in rows), max((r[0] for r in rows), default=after_ms)
