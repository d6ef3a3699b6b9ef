"""The node agent's API end to end: a real swtpm, the real agent code, HTTP to a live server.
Enrolment, quotes, and every refusal recorded with its reason."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone
from rest_framework.test import APIClient

from attest import readings
from attest.agent.http import AgentApi, AgentApiError, attest_once, enrol, fetch_challenge
from attest.agent.tpm import AK_ECC, AK_RSA, Agent
from attest.inventory import inventory_digest
from attest.swtpm import LocalCA, start_node_tpm
from scheduler.telemetry.sample import TelemetrySample as Sample
from tests.webapp.conftest import enrol_node, set_golden_values
from webapp.attestation import actions as attestation_actions
from webapp.attestation.models import Attestation, TelemetryBatch
from webapp.attestation.telemetry import cited_readings
from webapp.core.models import AuditEvent
from webapp.demo.agents import simulated_inventory
from webapp.fleet.models import Node, PcrPolicy, TelemetrySample
from webapp.fleet.telemetry import record_samples
from webapp.outbox.models import OutboxEntry
from webapp.outbox.relay import relay_once


@pytest.fixture(scope="module")
def stranger_tpm(tmp_path_factory):
    """A TPM whose EK certificate comes from a CA the server does not trust."""
    tpm = start_node_tpm(tmp_path_factory.mktemp("stranger"), LocalCA(tmp_path_factory.mktemp("x")))
    yield tpm
    tpm.stop()


@pytest.mark.parametrize("alg", [AK_ECC, AK_RSA])
def test_agent_enrols_and_attests(fleet, agent, api, alg):
    ak = enrol_node(agent, api, alg)
    node = Node.objects.get(pk=fleet.node.pk)
    assert node.status == Node.ACTIVE and node.ak_name == ak.name.hex()
    set_golden_values(node, agent)
    verdict = attest_once(agent, api, ak)
    assert verdict["valid"], verdict
    node.refresh_from_db()
    assert node.trust == Node.TRUSTED and node.last_good_attestation is not None
    functions = set(OutboxEntry.objects.values_list("function", flat=True))
    assert {"RegisterNode", "RecordAttestation"} <= functions


def test_pcr7_change_turns_the_node_red(fleet, tpm, api, tmp_path_factory, ca):
    # a TPM of its own: extending PCR 7 cannot be undone without a reboot
    own = start_node_tpm(tmp_path_factory.mktemp("pcr7"), ca)
    try:
        with Agent(own.tcti) as agent:
            ak = enrol_node(agent, api)
            set_golden_values(Node.objects.get(pk=fleet.node.pk), agent)
            assert attest_once(agent, api, ak)["valid"]
            agent.extend_pcr(7, b"secure boot disabled")
            verdict = attest_once(agent, api, ak)
    finally:
        own.stop()
    assert not verdict["valid"]
    assert "pcr_value_mismatch" in {r["code"] for r in verdict["reasons"]}
    assert Node.objects.get(pk=fleet.node.pk).trust == Node.FAILED


def test_ek_from_an_unknown_ca_is_refused_and_recorded(fleet, stranger_tpm, api):
    with Agent(stranger_tpm.tcti) as agent, pytest.raises(AgentApiError) as refused:
        enrol_node(agent, api)
    assert refused.value.status == 400
    codes = {r["code"] for r in refused.value.body["reasons"]}
    assert any(code.startswith("ek_") for code in codes), codes
    assert AuditEvent.objects.filter(action="node.enrolment_refused").exists()
    assert not Node.objects.get(pk=fleet.node.pk).ak_public


def test_wrong_credential_answer_is_refused(fleet, agent, api):
    request = agent.enrol(AK_ECC)
    api.post(
        "enrol/",
        {
            "ek_public": base64.b64encode(request.ek_public).decode(),
            "ek_certificate": base64.b64encode(request.ek_certificate).decode(),
            "ak_public": base64.b64encode(request.ak.public).decode(),
        },
    )
    inventory = simulated_inventory(fleet.node)
    evidence = agent.quote(request.ak, inventory_digest(fleet.node.name, inventory))
    body = {"inventory": inventory, "enrolment_quote": evidence_of(evidence)}
    with pytest.raises(AgentApiError) as refused:
        api.post("enrol/activate/", {"answer": base64.b64encode(b"\0" * 32).decode(), **body})
    assert refused.value.body["reasons"][0]["code"] == "credential_mismatch"
    assert not Node.objects.get(pk=fleet.node.pk).ak_public


def test_each_registrars_round_must_be_answered_by_the_tpm(fleet, agent, api):
    """An enrolment that answers the server's challenge but not a registrar's, or answers a
    registrar's wrongly, is refused before anything goes to the ledger."""
    request = agent.enrol(AK_ECC)
    b64 = base64.b64encode

    def activate(challenge: dict) -> str:
        blob, secret = (base64.b64decode(challenge[k]) for k in ("credential_blob", "secret"))
        return b64(agent.activate(request.ak, blob, secret)).decode()

    def round_trip(answers_for) -> dict:
        sent = api.post(
            "enrol/",
            {
                "ek_public": b64(request.ek_public).decode(),
                "ek_certificate": b64(request.ek_certificate).decode(),
                "ak_public": b64(request.ak.public).decode(),
            },
        )
        orgs = sorted(c["org"] for c in sent["registrar_challenges"])
        assert orgs == sorted(settings.LEDGER_ORGS)
        inventory = simulated_inventory(fleet.node)
        evidence = agent.quote(request.ak, inventory_digest(fleet.node.name, inventory))
        body = {
            "answer": activate(sent),
            "inventory": inventory,
            "enrolment_quote": evidence_of(evidence),
            "registrar_answers": answers_for(sent["registrar_challenges"]),
        }
        with pytest.raises(AgentApiError) as refused:
            api.post("enrol/activate/", body)
        return refused.value.body["reasons"][0]

    def first_only(challenges):
        return [{"org": c["org"], "challenge_id": c["challenge_id"], "answer": activate(c)}
                for c in challenges[:1]]  # fmt: skip

    def second_wrong(challenges):
        wrong = {**first_only(challenges[1:])[0], "answer": b64(b"\0" * 32).decode()}
        return [*first_only(challenges), wrong]

    assert round_trip(first_only)["code"] == "registrar_missing"
    reason = round_trip(second_wrong)
    assert reason["code"] == "registrar_credential_mismatch", reason
    assert not OutboxEntry.objects.filter(function="RegisterNode").exists()
    assert not Node.objects.get(pk=fleet.node.pk).ak_public


def test_an_unreachable_registrar_refuses_the_enrolment_with_its_name(fleet, agent, api, settings):
    settings.REGISTRARS = {**settings.REGISTRARS, "Org2MSP": "http://127.0.0.1:9"}  # discard port
    request = agent.enrol(AK_ECC)
    with pytest.raises(AgentApiError) as refused:
        api.post(
            "enrol/",
            {
                "ek_public": base64.b64encode(request.ek_public).decode(),
                "ek_certificate": base64.b64encode(request.ek_certificate).decode(),
                "ak_public": base64.b64encode(request.ak.public).decode(),
            },
        )
    [reason] = refused.value.body["reasons"]
    assert reason["code"] == "registrar_unavailable" and "Org2MSP" in reason["detail"]


def evidence_of(evidence) -> dict:
    return {
        "quote": base64.b64encode(evidence.quote).decode(),
        "signature": base64.b64encode(evidence.signature).decode(),
        "pcr_values": {
            "sha256": {str(i): v.hex() for i, v in evidence.pcr_values["sha256"].items()}
        },
    }


def test_registration_carries_the_ek_binding_and_the_inventory_quote(fleet, agent, api, ledger):
    """RegisterNode reaches the ledger with the EK chain, the AK certificate of each
    organisation's registrar (each after its own round with the TPM), the node's quote over
    its GPUs and the approved policy."""
    ak = enrol_node(agent, api)
    row = OutboxEntry.objects.get(function="RegisterNode")
    assert row.args["pcr_policy_id"] == "test-policy" and "pcr_policy" not in row.args
    certificates = row.args["ek_binding"]["ak_certificates"]
    assert sorted(certificates) == sorted(settings.LEDGER_ORGS)
    assert relay_once(ledger) == {"done": 1}, OutboxEntry.objects.values("last_error")
    node = json.loads(ledger.evaluate("GetNode", json.dumps({"node_id": fleet.node.name})))
    binding = node["ek_binding"]
    assert binding["ek_name"] == Node.objects.get(pk=fleet.node.pk).ek_name
    assert binding["registrars"] == {
        org: c["ak_certificate"]["activated_ns"] for org, c in certificates.items()
    }
    assert binding["inventory"] == sorted(simulated_inventory(fleet.node), key=lambda g: g["uuid"])
    assert node["pcr_policy_id"] == "test-policy"
    assert attest_once(agent, api, ak)["valid"]
    assert relay_once(ledger) == {"done": 1}  # RecordAttestation: valid on the ledger too


def test_gpus_the_node_does_not_have_are_refused_at_enrolment(fleet, agent, api):
    """The agent reports a GPU the node is not registered with (or misses one): refused with
    its reason, nothing registered."""
    stranger = {"uuid": "GPU-not-this-node", "name": "NVIDIA H100-SXM5-80GB", "serial": "1"}
    reported = [*simulated_inventory(fleet.node)[:-1], stranger]
    with pytest.raises(AgentApiError) as refused:
        enrol(agent, api, AK_ECC, reported)
    assert refused.value.body["reasons"][0]["code"] == "inventory_mismatch"
    assert not Node.objects.get(pk=fleet.node.pk).ak_public
    assert not OutboxEntry.objects.filter(function="RegisterNode").exists()


def test_gpus_of_another_generation_than_the_fleet_says_are_refused_at_enrolment(fleet, agent, api):
    """The node's GPUs report themselves (NVML names, under its enrolment quote) as H100s
    while the operator recorded A100s: refused before anything goes to the ledger, whose
    endorsers would refuse it as [enrol.generation_mismatch]."""
    assert {g.generation.catalogue_id for g in fleet.gpus} == {"A100-SXM4-80GB"}
    reported = [{**g, "name": "NVIDIA H100 80GB HBM3"} for g in simulated_inventory(fleet.node)]
    with pytest.raises(AgentApiError) as refused:
        enrol(agent, api, AK_ECC, reported)
    [reason] = refused.value.body["reasons"]
    assert reason["code"] == "generation_mismatch"
    assert "reported 'NVIDIA H100 80GB HBM3', which is not a A100-SXM4-80GB" in reason["detail"]
    assert not Node.objects.get(pk=fleet.node.pk).ak_public
    assert not OutboxEntry.objects.filter(function="RegisterNode").exists()


def test_an_enrolment_quote_over_another_inventory_is_refused(fleet, agent, api):
    """The quote's qualifying data must be the digest of the inventory sent beside it."""
    request = agent.enrol(AK_ECC)
    challenge = api.post(
        "enrol/",
        {
            "ek_public": base64.b64encode(request.ek_public).decode(),
            "ek_certificate": base64.b64encode(request.ek_certificate).decode(),
            "ak_public": base64.b64encode(request.ak.public).decode(),
        },
    )
    answer = agent.activate(
        request.ak,
        base64.b64decode(challenge["credential_blob"]),
        base64.b64decode(challenge["secret"]),
    )
    inventory = simulated_inventory(fleet.node)
    relabelled = [{**gpu, "name": "NVIDIA H100-SXM5-80GB"} for gpu in inventory]
    evidence = agent.quote(request.ak, inventory_digest(fleet.node.name, relabelled))
    body = {"inventory": inventory, "enrolment_quote": evidence_of(evidence)}
    with pytest.raises(AgentApiError) as refused:
        api.post("enrol/activate/", {"answer": base64.b64encode(answer).decode(), **body})
    assert "nonce_mismatch" in {r["code"] for r in refused.value.body["reasons"]}
    assert not Node.objects.get(pk=fleet.node.pk).ak_public


def test_replayed_quote_is_rejected_with_its_reason(fleet, agent, api):
    ak = enrol_node(agent, api)
    challenge = fetch_challenge(api)
    nonce = bytes.fromhex(challenge["nonce"])
    evidence = agent.quote(ak, nonce, challenge["selection"])
    body = {
        "nonce": nonce.hex(),
        "quote": base64.b64encode(evidence.quote).decode(),
        "signature": base64.b64encode(evidence.signature).decode(),
        "pcr_values": {
            "sha256": {str(i): v.hex() for i, v in evidence.pcr_values["sha256"].items()}
        },
    }
    assert api.post("quote/", body)["valid"]
    again = api.post("quote/", body)
    assert not again["valid"]
    assert "nonce_replayed" in {r["code"] for r in again["reasons"]}
    assert Attestation.objects.filter(node=fleet.node, valid=False).count() == 1
    assert OutboxEntry.objects.filter(function="RecordAttestation").count() == 1


@pytest.mark.parametrize(
    "body",
    [
        {"nonce": "zz", "quote": "AA==", "signature": "AA==", "pcr_values": {"sha256": {}}},
        {
            "nonce": "00" * 32,
            "quote": "not base64!",
            "signature": "AA==",
            "pcr_values": {"sha256": {"0": "00" * 32}},
        },
        {
            "nonce": "00" * 32,
            "quote": base64.b64encode(b"x" * 5000).decode(),
            "signature": "AA==",
            "pcr_values": {"sha256": {"0": "00" * 32}},
        },
        {
            "nonce": "00" * 32,
            "quote": "AA==",
            "signature": "AA==",
            "pcr_values": {"md5": {"0": "00" * 16}},
        },
        {
            "nonce": "00" * 32,
            "quote": "AA==",
            "signature": "AA==",
            "pcr_values": {"sha256": {"99": "00" * 32}},
        },
    ],
)
def test_malformed_quote_requests_are_400_and_write_nothing(fleet, api, body):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api.token}")
    response = client.post("/api/v1/agent/quote/", body, format="json")
    assert response.status_code == 400
    assert not Attestation.objects.exists()


def test_garbage_evidence_gets_a_verdict_not_a_crash(fleet, agent, api):
    enrol_node(agent, api)
    nonce = fetch_challenge(api)["nonce"]
    verdict = api.post(
        "quote/",
        {
            "nonce": nonce,
            "quote": base64.b64encode(b"\xff" * 40).decode(),
            "signature": base64.b64encode(b"\x00\x18" * 10).decode(),
            "pcr_values": {"sha256": {"0": "00" * 32}},
        },
    )
    assert not verdict["valid"] and verdict["reasons"]
    assert Node.objects.get(pk=fleet.node.pk).trust == Node.FAILED


def test_a_wrong_node_credential_is_refused(fleet, live_server, trusted_ca):
    with pytest.raises(AgentApiError) as refused:
        AgentApi(live_server.url, "wn_AAAAAAAA." + "A" * 32).post("challenge/")
    assert refused.value.status == 401


def test_tenant_keys_cannot_use_the_agent_api(owner):
    assert owner.client.post("/api/v1/agent/challenge/").status_code == 401


def test_revoked_ak_must_enrol_again(fleet, agent, api):
    ak = enrol_node(agent, api)
    attestation_actions.revoke_ak(Node.objects.get(pk=fleet.node.pk), actor="operator")
    with pytest.raises(AgentApiError) as refused:
        attest_once(agent, api, ak)
    assert refused.value.body["reasons"][0]["code"] == "not_enrolled"
    assert refused.value.body["code"] == "attestation.refused"
    assert "not_enrolled" in refused.value.body["detail"]
    assert OutboxEntry.objects.filter(function="RevokeAK").exists()


def test_nodes_without_a_fresh_good_quote_go_stale(fleet):
    node = fleet.node
    node.last_good_attestation = timezone.now() - timedelta(
        seconds=node.pcr_policy.effective_max_age_s() + 1
    )
    node.save()
    assert attestation_actions.mark_stale() == 1
    assert Node.objects.get(pk=node.pk).trust == Node.STALE


def inventory_file(node, tmp_path) -> Path:
    """The node's GPUs for `agent run --inventory`: this machine has none for NVML."""
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(simulated_inventory(node)))
    return path


def test_agent_cli_enrols_and_answers_challenges_on_a_schedule(fleet, tpm, api, tmp_path):
    env = {**os.environ, "WATTLEASE_NODE_CREDENTIAL": api.token}
    inventory = inventory_file(fleet.node, tmp_path)
    counters = tmp_path / "counters.csv"  # as the host's counter logger appends them
    counters.write_text(_readings(fleet.gpus[:2]) + "5,GPU-half-a-row")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "attest",
            "agent",
            "--tcti",
            tpm.tcti,
            "--state",
            str(tmp_path / "agent.json"),
            "run",
            "--server",
            api.server,
            "--interval",
            "0.2",
            "--rounds",
            "2",
            "--inventory",
            str(inventory),
            "--readings",
            str(counters),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert Attestation.objects.filter(node=fleet.node, valid=True).count() == 2
    assert Node.objects.get(pk=fleet.node.pk).trust == Node.TRUSTED
    # the first quote bound the whole rows logged before it; the half row waits
    (first,) = {b.attestation for b in TelemetryBatch.objects.all()}
    assert first == Attestation.objects.filter(node=fleet.node).order_by("created").first()
    assert TelemetryBatch.objects.count() == 2 and {b.rows for b in first.batches.all()} == {2}


def test_a_policy_without_an_age_of_its_own_uses_attestation_max_age_s(fleet, settings):
    settings.ATTESTATION_MAX_AGE_S = 60
    PcrPolicy.objects.filter(pk=fleet.node.pcr_policy_id).update(max_age_s=None)
    node = Node.objects.get(pk=fleet.node.pk)
    node.last_good_attestation = timezone.now() - timedelta(seconds=50)
    node.save()
    assert attestation_actions.mark_stale() == 0
    node.last_good_attestation = timezone.now() - timedelta(seconds=61)
    node.save()
    assert attestation_actions.mark_stale() == 1


def test_the_agent_quotes_as_often_as_attestation_interval_s_says(
    fleet, tpm, api, tmp_path, settings
):
    settings.ATTESTATION_INTERVAL_S = 1  # the agent's own default would be 60 s
    env = {**os.environ, "WATTLEASE_NODE_CREDENTIAL": api.token}
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "attest", "agent", "--tcti", tpm.tcti,
         "--state", str(tmp_path / "agent.json"),
         "run", "--server", api.server, "--rounds", "3",
         "--inventory", str(inventory_file(fleet.node, tmp_path))],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    verdicts = [json.loads(line) for line in result.stdout.splitlines() if "interval_s" in line]
    assert [(v["valid"], v["interval_s"]) for v in verdicts] == [(True, 1)] * 3
    assert 2 <= elapsed < 30  # two waits of the server's 1 s, not the default 60 s


# -- attested telemetry: the readings sent with a quote ---------------------------------------


def _readings(gpus, t0: int = 1_000) -> str:
    return "".join(f"{t},{g.uuid},{t * 300},300000,90,50,60\n" for g in gpus for t in (t0, t0 + 1))


def test_readings_sent_with_a_quote_are_kept_as_batches_its_quote_binds(fleet, agent, api):
    ak = enrol_node(agent, api)
    text = _readings(fleet.gpus[:2])
    assert attest_once(agent, api, ak, text)["valid"]
    attestation = Attestation.objects.get(node=fleet.node)
    batches = {b.gpu.uuid: b for b in TelemetryBatch.objects.filter(attestation=attestation)}
    assert sorted(batches) == sorted(g.uuid for g in fleet.gpus[:2])
    digests = readings.gpu_digests(readings.parse_rows(text))
    assert {uuid: b.digest for uuid, b in batches.items()} == digests
    assert all(b.rows == 2 and b.first_ms == 1_000 and b.last_ms == 1_001 for b in batches.values())
    # the ledger gets the readings themselves (it derives the same digests and keeps the
    # counters a bill's energy comes from), and the samples are stored
    entry = OutboxEntry.objects.get(function="RecordAttestation")
    by_gpu = readings.by_gpu(readings.parse_rows(text))
    assert entry.args["readings"] == {
        g: "".join(r.row + "\n" for r in rows) for g, rows in by_gpu.items()
    }
    assert "telemetry" not in entry.args
    assert TelemetrySample.objects.filter(gpu__in=fleet.gpus[:2]).count() == 4


def test_readings_are_stored_once_and_a_batch_reads_them_back(fleet, agent, api):
    ak = enrol_node(agent, api)
    text = _readings(fleet.gpus[:2])
    assert attest_once(agent, api, ak, text)["valid"]
    assert not TelemetryBatch.objects.exclude(evidence="").exists()  # no second copy
    cited = [
        {"gpu": g.uuid, "digest": TelemetryBatch.objects.get(gpu=g).digest} for g in fleet.gpus[:2]
    ]
    assert cited_readings(cited) == text  # what re-hashes to the digests the quote bound


def test_readings_other_than_those_stored_at_the_same_instants_are_refused(fleet, agent, api):
    ak = enrol_node(agent, api)
    record_samples([Sample(fleet.gpus[0].uuid, 1_000, 7, 250_000, 10, 10, 40)])  # another source
    with pytest.raises(AgentApiError, match="already has other readings") as refused:
        attest_once(agent, api, ak, _readings(fleet.gpus[:1]))
    assert refused.value.status == 400
    assert not Attestation.objects.exists() and not TelemetryBatch.objects.exists()
    assert TelemetrySample.objects.get(gpu=fleet.gpus[0]).energy_mj == 7  # nothing overwritten


def test_a_quote_not_bound_to_the_readings_sent_with_it_fails(fleet, agent, api):
    ak = enrol_node(agent, api)
    challenge = fetch_challenge(api)
    nonce = bytes.fromhex(challenge["nonce"])
    evidence = agent.quote(ak, nonce, challenge["selection"])  # over the plain nonce
    verdict = api.post(
        "quote/",
        {
            "nonce": nonce.hex(),
            "quote": base64.b64encode(evidence.quote).decode(),
            "signature": base64.b64encode(evidence.signature).decode(),
            "pcr_values": {
                "sha256": {str(i): v.hex() for i, v in evidence.pcr_values["sha256"].items()}
            },
            "telemetry": _readings(fleet.gpus[:1]),
        },
    )
    assert not verdict["valid"]
    assert "nonce_mismatch" in {r["code"] for r in verdict["reasons"]}, verdict["reasons"]


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("1,GPU-not-here,3,4,5,6,7\n", "are not GPUs of"),
        ("1,{gpu},3\n", "expected 7 fields"),
        ("1,{gpu},3,4,500,6,7\n", "util_gpu_pct"),
        ("1,{gpu},3,4,5,6,7\n1,{gpu},3,4,5,6,7\n", "two readings at t_ms 1"),
    ],
)
def test_readings_no_quote_can_bind_are_refused_and_nothing_is_kept(
    fleet, agent, api, text, detail
):
    enrol_node(agent, api)
    body = {
        "nonce": fetch_challenge(api)["nonce"],
        "quote": base64.b64encode(b"\xff" * 40).decode(),
        "signature": base64.b64encode(b"\x00\x18" * 10).decode(),
        "pcr_values": {"sha256": {"0": "00" * 32}},
        "telemetry": text.format(gpu=fleet.gpus[0].uuid),
    }
    with pytest.raises(AgentApiError, match=detail) as refused:
        api.post("quote/", body)
    assert refused.value.status == 400 and "telemetry_refused" in str(refused.value)
    assert not Attestation.objects.exists() and not TelemetryBatch.objects.exists()


def test_the_ledgers_verdict_stands_where_the_servers_copy_of_the_policy_differs(
    fleet, node_agent, ledger
):
    """An operator edits the node's PCR policy in the admin but both organisations never
    approve it on the ledger: this server now finds the honest quote invalid, every endorser
    (checking the approved policy) valid. Once recorded, the ledger's verdict is the node's."""
    assert node_agent.attest()["valid"]
    relay_once(ledger)
    policy = Node.objects.get(pk=fleet.node.pk).pcr_policy
    policy.pcrs = {"sha256": {**policy.pcrs["sha256"], "7": "ab" * 32}}  # not on the ledger
    policy.save()
    assert not node_agent.attest()["valid"]
    assert Node.objects.get(pk=fleet.node.pk).trust == Node.FAILED
    assert relay_once(ledger) == {"done": 1}  # RecordAttestation (its challenge went before)
    newest = Attestation.objects.filter(node=fleet.node).first()
    record = json.loads(
        ledger.evaluate("GetAttestation", json.dumps({"attestation_id": newest.ledger_tx}))
    )
    assert record["valid"] and newest.valid
    assert newest.reasons[-1]["code"] == "ledger_verdict"
    assert Node.objects.get(pk=fleet.node.pk).trust == Node.TRUSTED
    assert AuditEvent.objects.filter(action="node.ledger_verdict").count() == 1
