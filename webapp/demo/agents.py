"""The demo's node agents: one swtpm per simulated node, each with the real agent code
talking HTTP to the demo server — enrol (EK certificate chain, credential activation), then
a fresh quote every ATTESTATION_INTERVAL_S, bound to the readings of the node's GPUs since
its previous one (docs/billing.md, "Attested telemetry"; the demo's counters are the trace
the demo loop replays). Each agent reports the GPUs the demo simulates for its node (the
replayed trace's GPUs; NVML on a real host). One node has its PCR 7 extended after its first
good quote (as if Secure Boot had been switched off), so the dashboard shows it red."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import signal
import threading
import time
import urllib.request
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections

from attest.agent.http import AgentApi, enrol
from attest.agent.supervise import AgentLoop
from attest.agent.tpm import Agent, AkKey
from attest.clock import is_power_loss
from attest.policy import DEFAULT_SELECTION
from attest.readings import row_text
from attest.registrar_service import run_registrars
from attest.swtpm import DEMO_DA_PARAMETERS, LocalCA, Swtpm, start_node_tpm
from scheduler.telemetry.sample import CSV_FIELDS
from webapp.attestation import actions as attestation_actions
from webapp.fleet import rate_card
from webapp.fleet.models import Node, PcrPolicy, TelemetrySample

log = logging.getLogger("wattlease.demo.agents")

SERVER_WAIT_S = 60.0
TAMPERED_NODE_INDEX = -1  # the last demo node
TAMPER_EVENT = b"demo: Secure Boot disabled"
STOP_WAIT_S = 3.0
AK_STATE_FILE = "agent-ak.json"  # the AK's public and TPM-wrapped private part
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


# the ways a demo is stopped: Ctrl-C, a service manager, a closed terminal
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def signals_to_main_thread() -> None:
    """Block SIGINT/SIGTERM/SIGHUP in this thread, so the kernel delivers them to the main thread,
    whose event loop would otherwise not notice a signal caught by a thread in C code."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


class DemoAgents:
    def __init__(self, data_dir: Path, server: str, interval_s: float) -> None:
        self.root = Path(data_dir) / "tpm"
        self.server = server
        self.interval_s = interval_s
        self.tpms: dict[str, Swtpm] = {}
        self.stop_registrars = lambda: None
        self.threads: list[threading.Thread] = []
        self.stop_event = threading.Event()
        self.say = print

    def prepare(self, nodes: list[Node], policy: PcrPolicy, progress=print) -> None:
        """Start the swtpms, trust their EK CA (TPM_EK_CA_DIR), start both organisations'
        registrars (REGISTRARS) and record the golden values from the first node."""
        self.say = progress
        ca = LocalCA(self.root / "ca")
        for node in nodes:
            progress(f"  starting swtpm for {node.name}…")
            self.tpms[node.name] = tpm = start_node_tpm(self.root / node.name, ca)
            if tpm.lost_power:
                progress(
                    f"  node {node.name} recovering after power loss: its TPM was stopped "
                    "without an orderly shutdown (the demo killed or crashed); it attests "
                    "again with its next quote"
                )
            self._da_parameters(node.name, tpm)
        # swtpm_localca creates its CA with the first EK certificate; trust it from now on
        ca_dir = Path(settings.TPM_EK_CA_DIR)
        ca_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(ca.root_cert_file, ca_dir / "demo-swtpm-root.pem")
        shutil.copy(ca.issuer_cert_file, ca_dir / "demo-swtpm-issuer.pem")
        # the demo plays both organisations, so it runs both registrars (their keys are kept
        # under the demo's folder: the keys approved on the ledger stay valid on a restart)
        progress("  starting each organisation's registrar…")
        urls, self.stop_registrars = run_registrars(
            settings.LEDGER_ORGS, ca_dir, self.root / "registrars"
        )
        settings.REGISTRARS = urls
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
            values = agent.read_pcrs(DEFAULT_SELECTION)["sha256"]
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

    def _da_parameters(self, node: str, tpm: Swtpm) -> None:
        """The demo's explicit dictionary-attack parameters (docs/attestation.md). A TPM an
        older demo left in lockout is let out with its (empty) lockout authorisation."""
        tpm.set_da_parameters(DEMO_DA_PARAMETERS)
        failures, limit = tpm.lockout_counter()
        if failures >= limit:
            tpm.reset_lockout()
            self.say(f"  the TPM of {node} was in dictionary-attack lockout: reset")

    def _open_tpm(self, node: str) -> Agent:
        """The node's TPM; a swtpm that died (a crash: a power loss for its TPM) is started
        again from its state on its port first."""
        tpm = self.tpms[node]
        if not tpm.alive and not self.stop_event.is_set():
            self.say(f"swtpm of {node} stopped (a power loss): starting it again from its state")
            tpm.start()
            self._da_parameters(node, tpm)
        return Agent(tpm.tcti)

    def _agent(self, node: str, token: str, inventory: list[dict[str, str]], tamper: bool) -> None:
        signals_to_main_thread()
        if not self._wait_for_server():
            log.error("agent of %s: server did not come up", node)
            return
        mark = [time.time_ns() // 1_000_000]  # the history before the demo is not billed

        def counters() -> str:
            close_old_connections()  # this thread's, between rounds
            readings, mark[0] = read_counters(node, mark[0])
            return readings

        def on_verdict(agent: Agent, verdict: dict) -> None:
            if is_power_loss(verdict.get("reasons") or []):
                self.say(
                    f"node {node} recovering after power loss: its TPM restarted without "
                    "an orderly shutdown; attested again, the event is on its page"
                )
            if tamper and verdict.get("valid"):
                agent.extend_pcr(7, TAMPER_EVENT)

        loop = AgentLoop(
            open_tpm=lambda: self._open_tpm(node),
            api=AgentApi(self.server, token),
            load_ak=lambda agent, api: self._load_ak(node, agent, api, inventory),
            interval_s=self.interval_s,
            stop=self.stop_event,
            read_counters=counters,
            on_verdict=on_verdict,
            name=f"agent of {node}",
        )
        refused = loop.run()
        if refused is not None:
            self.say(
                f"agent of {node} stopped: {refused} (reported; not retried, so the TPM "
                "is not driven into dictionary-attack lockout)"
            )

    def _load_ak(
        self, node: str, agent: Agent, api: AgentApi, inventory: list[dict[str, str]]
    ) -> AkKey:
        """The AK this node enrolled in an earlier run, if the server still has it (so a
        restart keeps its registration and its clock record on the ledger); else enrol."""
        state = self.root / node / AK_STATE_FILE
        registered = Node.objects.filter(name=node).values_list("ak_public", flat=True).first()
        if state.exists():
            ak = AkKey.from_dict(json.loads(state.read_text()))
            if registered is not None and bytes(registered) == ak.public:
                return ak
        ak = enrol(agent, api, inventory=inventory)
        state.write_text(json.dumps(ak.to_dict()))
        return ak

    def stop(self) -> None:
        """Stop promptly: agents are daemon threads; one stuck in an HTTP call to the
        server that is shutting down is not waited for beyond STOP_WAIT_S."""
        self.stop_event.set()
        deadline = time.monotonic() + STOP_WAIT_S
        for thread in self.threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        for tpm in self.tpms.values():
            tpm.stop()
        self.stop_registrars()


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
