"""The node agent's side of the server's agent API (`/api/agent/…`): enrol once, then
answer challenges (the long-running loop is attest.agent.supervise). Plain urllib and JSON;
no Django.

The AK (public and TPM-wrapped private part) is kept in a state file so the agent survives
restarts without re-enrolling; the private part is useless outside this TPM.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attest import readings as telemetry
from attest.agent.tpm import AK_ECC, Agent, AkKey, QuoteEvidence
from attest.inventory import inventory_digest, read_nvml_inventory

log = logging.getLogger("attest.agent")

HTTP_TIMEOUT_S = 30.0
CHALLENGE_WAIT_S = 30.0  # the ledger commits a challenge in seconds; then the round fails
MAX_RETRY_S = 5.0  # never sleep longer than this between asks, whatever the server says
MAX_RESPONSE_BYTES = 1 << 20
BAD_REQUEST = 400
MAX_TELEMETRY_CHARS = telemetry.MAX_QUOTED_READINGS_CHARS  # per quote; the rest waits


class AgentApiError(RuntimeError):
    """The server refused a request; carries its status and reasons."""

    def __init__(self, status: int, body: Any) -> None:
        reasons = body.get("reasons") if isinstance(body, dict) else None
        detail = "; ".join(f"{r.get('code')}: {r.get('detail')}" for r in reasons or []) or body
        super().__init__(f"server answered {status}: {detail}")
        self.status = status
        self.body = body


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class AgentApi:
    def __init__(self, server: str, token: str) -> None:
        self.server = server.rstrip("/")
        self.token = token

    def post(self, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.server}/api/agent/{path}",
            data=json.dumps(payload or {}).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
                return json.loads(response.read(MAX_RESPONSE_BYTES))
        except urllib.error.HTTPError as exc:
            try:
                body = json.loads(exc.read(MAX_RESPONSE_BYTES))
            except ValueError:
                body = exc.reason
            raise AgentApiError(exc.code, body) from None


def enrol(
    agent: Agent,
    api: AgentApi,
    alg: str = AK_ECC,
    inventory: list[dict[str, str]] | None = None,
) -> AkKey:
    """Create an AK, prove it shares a TPM with the EK (to the server and to each
    organisation's registrar, whose challenges the server relays), and quote over the GPU inventory
    (`inventory`: {uuid, name, serial} per GPU; default: what NVML reports on this host)
    with its digest as qualifying data, so the ledger records the GPUs this node reported."""
    gpus = read_nvml_inventory() if inventory is None else inventory
    request = agent.enrol(alg)
    payload = {"ek_public": _b64(request.ek_public), "ak_public": _b64(request.ak.public)}
    if request.ek_certificate:
        payload["ek_certificate"] = _b64(request.ek_certificate)
    challenge = api.post("enrol/", payload)
    answer = agent.activate(
        request.ak,
        base64.b64decode(challenge["credential_blob"]),
        base64.b64decode(challenge["secret"]),
    )
    # every organisation's registrar's own round (docs/operations.md, "Registrars")
    registrar_answers = [
        {
            "org": sent["org"],
            "challenge_id": sent["challenge_id"],
            "answer": _b64(
                agent.activate(
                    request.ak,
                    base64.b64decode(sent["credential_blob"]),
                    base64.b64decode(sent["secret"]),
                )
            ),
        }
        for sent in challenge.get("registrar_challenges", [])
    ]
    digest = inventory_digest(challenge["node_id"], gpus)
    evidence = agent.quote(request.ak, digest, challenge["selection"])
    api.post(
        "enrol/activate/",
        {
            "answer": _b64(answer),
            "registrar_answers": registrar_answers,
            "inventory": gpus,
            "enrolment_quote": _evidence(evidence),
        },
    )
    return request.ak


def _evidence(evidence: QuoteEvidence) -> dict[str, Any]:
    return {
        "quote": _b64(evidence.quote),
        "signature": _b64(evidence.signature),
        "pcr_values": {
            bank: {str(i): v.hex() for i, v in pcrs.items()}
            for bank, pcrs in evidence.pcr_values.items()
        },
    }


def fetch_challenge(api: AgentApi, wait_s: float = CHALLENGE_WAIT_S) -> dict[str, Any]:
    """The ledger's challenge for this node. The server answers 202 with `retry_after_s` while
    the ledger is still issuing it (IssueChallenge commits through the outbox relay)."""
    deadline = time.monotonic() + wait_s
    challenge = api.post("challenge/")
    while "nonce" not in challenge:
        if time.monotonic() >= deadline:
            raise AgentApiError(
                504,
                {
                    "reasons": [
                        {
                            "code": "challenge_timeout",
                            "detail": f"the ledger issued no challenge within {wait_s:.0f} s",
                        }
                    ]
                },
            )
        retry = challenge.get("retry_after_s", 1.0)
        time.sleep(min(float(retry) if isinstance(retry, int | float) else 1.0, MAX_RETRY_S))
        challenge = api.post("challenge/")
    return challenge


def attest_once(agent: Agent, api: AgentApi, ak: AkKey, readings: str = "") -> dict[str, Any]:
    """Fetch the ledger's challenge, quote the selected PCRs over it and over the digests of
    `readings` (the GPUs' canonical CSV rows since the previous quote: attest.readings), send
    both, return the verdict."""
    challenge = fetch_challenge(api)
    nonce = bytes.fromhex(challenge["nonce"])
    digests = telemetry.gpu_digests(telemetry.parse_rows(readings))
    evidence = agent.quote(ak, telemetry.qualifying_data(nonce, digests), challenge["selection"])
    verdict = api.post(
        "quote/", {"telemetry": readings, "nonce": nonce.hex(), **_evidence(evidence)}
    )
    if isinstance(challenge.get("interval_s"), (int, float)):
        verdict["interval_s"] = challenge["interval_s"]
    return verdict


def load_or_enrol(
    agent: Agent,
    api: AgentApi,
    state: Path,
    alg: str = AK_ECC,
    inventory: list[dict[str, str]] | None = None,
) -> AkKey:
    if state.exists():
        return AkKey.from_dict(json.loads(state.read_text()))
    ak = enrol(agent, api, alg, inventory)
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps(ak.to_dict()))
    return ak


class PendingReadings:
    """Readings waiting for a quote: each round adds what the counters read since, sends the
    oldest whole rows that fit in one request, and drops them once sent (or refused)."""

    def __init__(self, read_counters: Callable[[], str] | None) -> None:
        self.read_counters = read_counters
        self.rows = ""
        self.batch = ""

    def take(self) -> str:
        self.rows += self.read_counters() if self.read_counters else ""
        cut = len(self.rows)
        if cut > MAX_TELEMETRY_CHARS:
            cut = self.rows.rfind("\n", 0, MAX_TELEMETRY_CHARS) + 1
        self.batch = self.rows[:cut]
        return self.batch

    def done(self) -> None:
        self.rows = self.rows[len(self.batch) :]
        self.batch = ""


class FileCounters:
    """The host's counter log: whole CSV rows (attest.readings) another process appends, e.g.
    an NVML logger; each call returns those appended since the previous one."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def __call__(self) -> str:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                data = handle.read(MAX_TELEMETRY_CHARS)
        except FileNotFoundError:
            return ""
        whole = data[: data.rfind(b"\n") + 1]
        self.offset += len(whole)
        return whole.decode("ascii", errors="replace")


def answer(agent: Agent, api: AgentApi, ak: AkKey, pending: PendingReadings) -> dict[str, Any]:
    """One round: a quote over the pending readings. Readings the server refuses (400) or no
    quote can bind (malformed) are dropped, with the error raised to the caller."""
    try:
        verdict = attest_once(agent, api, ak, pending.take())
    except AgentApiError as exc:
        if exc.status == BAD_REQUEST:
            pending.done()
        raise
    except ValueError:
        pending.done()
        raise
    pending.done()
    return verdict
