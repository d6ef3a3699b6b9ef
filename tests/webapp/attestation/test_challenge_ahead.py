"""The attestation watch asks the ledger for a running agent's next challenge shortly before
the agent comes for it, so the agent's request is answered at once (actions.challenge_ahead)."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from attest.agent.http import AgentApi, attest_once
from webapp.attestation import actions
from webapp.attestation.actions.quotes import CHALLENGE_LEAD_S
from webapp.attestation.models import Attestation, Nonce
from webapp.fleet.models import Node
from webapp.fleet.partitions import ensure_days
from webapp.outbox import records
from webapp.outbox.models import OutboxEntry

LEAD = timedelta(seconds=CHALLENGE_LEAD_S)
TICK = timedelta(microseconds=1)


def challenges_asked() -> int:
    return OutboxEntry.objects.filter(function="IssueChallenge").count()


@pytest.fixture
def quoted(fleet):
    """fleet.node, whose last good quote was one attestation interval before `due`."""
    node = fleet.node
    node.last_good_attestation = timezone.now() - timedelta(hours=1)
    node.save()
    return node


def due(node):
    return node.last_good_attestation + timedelta(seconds=settings.ATTESTATION_INTERVAL_S)


@pytest.mark.parametrize(
    "offset, asked",
    [
        (-LEAD - TICK, 0),  # not yet due within the lead
        (-LEAD, 1),  # due within the lead: asked for
        (TICK, 1),  # just overdue
        (LEAD - TICK, 1),
        (LEAD, 0),  # missed its round by the lead: its agent asks itself when it comes back
    ],
)
def test_a_node_is_challenged_ahead_only_when_its_round_is_within_the_lead(quoted, offset, asked):
    assert actions.challenge_ahead(now=due(quoted) + offset) == asked
    assert challenges_asked() == asked
    if asked:
        entry = OutboxEntry.objects.get(function="IssueChallenge")
        assert entry.args == {"node_id": quoted.name}
        assert entry.status == OutboxEntry.PENDING


def test_one_challenge_in_flight_is_not_asked_for_twice(quoted):
    now = due(quoted)
    assert actions.challenge_ahead(now=now) == 1
    assert actions.challenge_ahead(now=now) == 0
    assert challenges_asked() == 1


def test_a_challenge_in_flight_for_another_node_does_not_count(quoted):
    other = Node.objects.create(
        name="node-2", site=quoted.site, pcr_policy=quoted.pcr_policy, status=Node.ACTIVE
    )
    records.challenge_requested(other)
    assert actions.challenge_ahead(now=due(quoted)) == 1


def test_a_pass_costs_the_same_queries_for_one_node_due_as_for_many(quoted):
    now = due(quoted)
    with CaptureQueriesContext(connection) as one:
        assert actions.challenge_ahead(now=now) == 1
    for i in range(2, 6):
        Node.objects.create(
            name=f"node-{i}",
            site=quoted.site,
            pcr_policy=quoted.pcr_policy,
            status=Node.ACTIVE,
            trust=Node.TRUSTED,
            last_good_attestation=quoted.last_good_attestation,
        )
    with CaptureQueriesContext(connection) as many:
        assert actions.challenge_ahead(now=now) == 4
    assert len(many) == len(one)


def test_a_node_with_an_open_challenge_is_not_asked_again(quoted):
    now = due(quoted)
    Nonce.objects.create(
        value="ab" * 32,
        subject=quoted.name,
        expires_at=now.timestamp() + actions.quotes.CHALLENGE_MARGIN_S + 1,
    )
    assert actions.challenge_ahead(now=now) == 0


@pytest.mark.parametrize(
    "nonce",
    [
        {"subject": "node-2"},  # another node's
        {"consumed": True},  # answered
        {"expires_in_s": 0},  # closing: no time left to quote
    ],
)
def test_a_challenge_the_agent_could_not_use_does_not_count_as_open(quoted, nonce):
    now = due(quoted)
    Nonce.objects.create(
        value="cd" * 32,
        subject=nonce.get("subject", quoted.name),
        consumed=nonce.get("consumed", False),
        expires_at=now.timestamp()
        + actions.quotes.CHALLENGE_MARGIN_S
        + nonce.get("expires_in_s", 60),
    )
    assert actions.challenge_ahead(now=now) == 1


@pytest.mark.parametrize(
    "change",
    [
        {"trust": Node.FAILED},  # its last quote failed: it is not leasable on its next one
        {"trust": Node.STALE},
        {"status": Node.ENROLLING},  # its AK was revoked
        {"last_good_attestation": None},
    ],
)
def test_only_a_trusted_active_node_with_a_good_quote_is_challenged_ahead(quoted, change):
    now = due(quoted)
    Node.objects.filter(pk=quoted.pk).update(**change)
    assert actions.challenge_ahead(now=now) == 0


def test_no_challenge_ahead_when_the_policys_window_would_close_before_the_agent_comes(quoted):
    policy = quoted.pcr_policy
    policy.max_age_s = CHALLENGE_LEAD_S + 2 * actions.quotes.CHALLENGE_MARGIN_S - 1
    policy.save()
    assert actions.challenge_ahead(now=due(quoted)) == 0
    policy.max_age_s += 1
    policy.save()
    assert actions.challenge_ahead(now=due(quoted)) == 1


def test_the_watch_asks_for_the_challenges_due(transactional_db, quoted):
    quoted.last_good_attestation = timezone.now() - timedelta(
        seconds=settings.ATTESTATION_INTERVAL_S - CHALLENGE_LEAD_S / 2
    )
    quoted.save()
    out = StringIO()
    call_command("attestation_watch", "--once", stdout=out)
    assert "challenges asked ahead 1" in out.getvalue()
    assert challenges_asked() == 1


def test_an_agent_challenged_ahead_gets_its_nonce_at_once_and_quotes_over_it(
    attested_node, node_agent, fleet
):
    """The whole path: the ledger issues the challenge ahead (the relay commits it), the
    agent's first request is answered with it, the quote over it is valid."""
    node = Node.objects.get(pk=fleet.node.pk)
    assert actions.challenge_ahead(now=due(node) - LEAD) == 1
    deadline = time.monotonic() + 30
    while not Nonce.objects.filter(subject=node.name, consumed=False).exists():
        assert time.monotonic() < deadline, OutboxEntry.objects.values("function", "last_error")
        time.sleep(0.1)
    issued = Nonce.objects.get(subject=node.name, consumed=False)
    challenge = node_agent.api.post("challenge/")  # no 202: the first answer has the nonce
    assert challenge["nonce"] == issued.value
    assert node_agent.attest()["valid"]
    newest = Attestation.objects.filter(node=node).order_by("-created", "-pk").first()
    assert newest.nonce == issued.value


class CountingApi(AgentApi):
    """The agent API served in this thread, so the statements each request runs are counted
    (the live server's thread has its own connection)."""

    statements: dict[str, int]

    def post(self, path, payload=None):
        with CaptureQueriesContext(connection) as queries:
            response = Client().post(
                "/api/agent/" + path,
                data=json.dumps(payload or {}),
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {self.token}",
            )
        self.statements[path] = len(queries)
        return response.json()


def test_a_rounds_requests_stay_within_their_statement_budget(attested_node, node_agent, fleet):
    """A round at fleet size is one challenge request and one quote (docs/benchmarks.md, "10,000
    GPUs within one core"): their statements, BEGIN and COMMIT included, are what it costs."""
    node = Node.objects.get(pk=fleet.node.pk)
    actions.challenge_ahead(now=due(node) - LEAD)
    deadline = time.monotonic() + 30
    while not Nonce.objects.filter(subject=node.name, consumed=False).exists():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    api = CountingApi("http://in-process", node_agent.api.token)
    api.statements = {}
    start = int(time.time() * 1000) - 60_000
    readings = "".join(
        f"{start + k * 10_000},{gpu.uuid},{k * 1000},300000,50,40,60\n"
        for k in range(6)
        for gpu in node.gpus.order_by("uuid")
    )
    ensure_days(
        [start]
    )  # the day's first readings create its partition (PostgreSQL): not a round's cost
    assert attest_once(node_agent.agent, api, node_agent.ak, readings)["valid"]
    assert api.statements["challenge/"] <= 4
    # 17 on SQLite; PostgreSQL adds the partition's look-up (fleet.partitions.ensure_days)
    assert api.statements["quote/"] <= (18 if connection.vendor == "postgresql" else 17)


def test_challenges_in_flight_are_found_by_key_without_reading_any_rows_args(quoted):
    """Looking a node's challenges up by a key of `args` went wrong on SQLite: Django compared
    the extracted key as JSON, JSON_EXTRACT('<node name>', '$'), and SQLite refused the name as
    malformed JSON as soon as a challenge was in flight (the demo's agents got a 500). The key
    is a plain string on every row; the look-up reads no JSON."""
    with CaptureQueriesContext(connection) as queries:
        actions.challenge_ahead(now=due(quoted))
        records.challenge_requested(quoted)
    conditions = [q["sql"].split(" WHERE ", 1)[1] for q in queries if " WHERE " in q["sql"]]
    assert conditions
    assert not [c for c in conditions if "args" in c]
