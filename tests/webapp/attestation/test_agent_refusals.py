"""The agent's loop (attest.agent.supervise) against a live server and a real swtpm: it
stops at an authorisation its TPM refused, reports it, and leaves the TPM's dictionary-attack
counter below its limit; it retries a server that is down with backoff until it answers."""

from __future__ import annotations

import re
import subprocess
import threading

import pytest
from tpm2_pytss import TPM2B_AUTH, TPM2B_PUBLIC, TPM2B_SENSITIVE_CREATE, TPMS_SENSITIVE_CREATE

from attest.agent.http import AgentApi, attest_once
from attest.agent.supervise import AgentLoop, Backoff
from attest.agent.tpm import AK_ATTRS, AK_ECC, AK_TEMPLATES, Agent, AkKey
from attest.swtpm import DaParameters, start_node_tpm
from tests.services import free_port
from tests.webapp.conftest import enrol_node
from webapp.attestation import health
from webapp.attestation.models import Attestation, NodeEvent
from webapp.fleet.models import Node
from webapp.observability.collector import DatabaseCollector

# a TPM that locks out after three failures and forgives none during the test: an agent that
# retried its refused authorisation would lock it out within the test
STRICT_DA = DaParameters(max_tries=3, recovery_time_s=1000, lockout_recovery_s=1000)
FAST = {"base_s": 0.05, "cap_s": 0.2}
LOOP_TIMEOUT_S = 60


@pytest.fixture
def strict_tpm(tmp_path, ca):
    """A TPM of its own (its DA counter is the test's), with the EK CA the server trusts."""
    tpm = start_node_tpm(tmp_path / "strict", ca)
    tpm.set_da_parameters(STRICT_DA)
    yield tpm
    tpm.stop()


def lockout_counter(tcti: str) -> tuple[int, int]:
    """TPM2_PT_LOCKOUT_COUNTER and TPM2_PT_MAX_AUTH_FAIL, as tpm2_getcap prints them."""
    out = subprocess.run(
        ["tpm2_getcap", "-T", tcti, "properties-variable"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    values = dict(re.findall(r"(TPM2_PT_\w+): (0x[0-9A-Fa-f]+)", out))
    return int(values["TPM2_PT_LOCKOUT_COUNTER"], 16), int(values["TPM2_PT_MAX_AUTH_FAIL"], 16)


def ak_with_a_password(agent: Agent) -> AkKey:
    """An AK whose authorisation value the agent does not hold (a key someone else made, or
    changed): every use the agent makes of it is a refused authorisation."""
    template = TPM2B_PUBLIC.parse(AK_TEMPLATES[AK_ECC], objectAttributes=AK_ATTRS)
    secret = TPM2B_SENSITIVE_CREATE(TPMS_SENSITIVE_CREATE(userAuth=TPM2B_AUTH(b"not-yours")))
    with agent.ek() as ek, agent._ek_session() as session:
        private, public = agent.esapi.create(ek, secret, template, session1=session)[:2]
    return AkKey(public.marshal(), private.marshal(), public.get_name().marshal()[2:])


def run_in_thread(loop: AgentLoop) -> threading.Thread:
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    return thread


@pytest.mark.swtpm
def test_an_agent_stops_at_a_refused_authorisation_and_never_locks_the_tpm_out(
    fleet, strict_tpm, api
):
    with Agent(strict_tpm.tcti) as agent:
        enrol_node(agent, api)
        locked_ak = ak_with_a_password(agent)
    stop = threading.Event()
    loop = AgentLoop(
        open_tpm=lambda: Agent(strict_tpm.tcti),
        api=api,
        load_ak=lambda agent, api: locked_ak,
        interval_s=0.1,
        stop=stop,
        backoff=Backoff(**FAST),
    )
    thread = run_in_thread(loop)
    thread.join(LOOP_TIMEOUT_S)
    stop.set()
    assert not thread.is_alive(), "the agent kept going after its TPM refused it"
    assert loop.refused is not None and loop.refused.code == "tpm_auth_fail"
    failures, limit = lockout_counter(strict_tpm.tcti)
    assert failures == 1 < limit
    node = Node.objects.get(pk=fleet.node.pk)
    event = NodeEvent.objects.get(node=node, reported_by_agent=True)
    assert event.code == "tpm_auth_fail"
    assert health.why_not_attested(node)["code"] == "tpm_auth_fail"
    samples = {
        (s.labels["node"], s.labels["reason"]): s.value
        for metric in DatabaseCollector().collect()
        if metric.name == "wattlease_node_not_attested"
        for s in metric.samples
    }
    assert samples[(node.name, "tpm_auth_fail")] == 1


@pytest.mark.swtpm
def test_an_agent_retries_a_server_that_is_down_and_attests_once_it_answers(fleet, strict_tpm, api):
    with Agent(strict_tpm.tcti) as agent:
        ak = enrol_node(agent, api)
    down = AgentApi(f"http://127.0.0.1:{free_port()}", api.token)  # nothing listens there
    stop = threading.Event()
    verdicts: list[dict] = []
    loop = AgentLoop(
        open_tpm=lambda: Agent(strict_tpm.tcti),
        api=down,
        load_ak=lambda agent, api: ak,
        interval_s=0.1,
        stop=stop,
        on_verdict=lambda agent, verdict: (verdicts.append(verdict), stop.set()),
        backoff=Backoff(**FAST),
    )
    thread = run_in_thread(loop)
    try:
        while loop.backoff.failures < 3 and thread.is_alive():
            stop.wait(0.05)
        assert thread.is_alive() and not verdicts  # still trying, backing off
        down.server = api.server  # the server is back
        thread.join(LOOP_TIMEOUT_S)
    finally:
        stop.set()
    assert verdicts and verdicts[0]["valid"], verdicts
    assert Node.objects.get(pk=fleet.node.pk).trust == Node.TRUSTED
    assert lockout_counter(strict_tpm.tcti)[0] == 0


def test_backoff_grows_to_its_cap_with_jitter():
    backoff = Backoff(base_s=1.0, cap_s=8.0)
    delays = [backoff.next_delay() for _ in range(6)]
    for n, delay in enumerate(delays):
        ceiling = min(8.0, 2**n)
        assert ceiling / 2 <= delay <= ceiling
    assert len(set(delays)) == len(delays)  # jittered: no two agents retry in lockstep
    backoff.reset()
    assert backoff.next_delay() <= 1.0


@pytest.mark.swtpm
def test_a_new_enrolment_starts_a_new_clock_baseline_as_on_the_ledger(fleet, strict_tpm, api):
    """RegisterNode clears the ledger's clock record; the app compares with the attestations
    since the node's enrolment only, so both verifiers judge a quote the same way (here: a
    record from an earlier enrolment whose counts this TPM never reached)."""
    node = Node.objects.get(pk=fleet.node.pk)
    earlier = {"clock": 10**9, "reset_count": 10**6, "restart_count": 0, "safe": True}
    Attestation.objects.create(
        node=node, nonce="00" * 32, valid=True, quote=b"", signature=b"", clock=earlier
    )
    with Agent(strict_tpm.tcti) as agent:
        ak = enrol_node(agent, api)
        verdict = attest_once(agent, api, ak)
    assert verdict["valid"], verdict
