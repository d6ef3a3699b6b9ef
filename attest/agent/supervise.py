"""The agent's long-running loop (docs/attestation.md, "Agent: retries and refusals"): enrol
or load its AK, then answer a challenge every interval, never giving up silently.

- Transient failures (server down, 5xx, 429, a challenge the ledger has not issued yet, a
  refusal a later state may cure, a TPM that is restarting) are retried with exponential
  backoff and jitter, so a fleet that lost its server does not come back in lockstep.
- A TPM that refuses an authorisation (TPM_RC_AUTH_FAIL, TPM_RC_BAD_AUTH, TPM_RC_LOCKOUT) is
  never asked again: each refused try of a DA-protected key counts toward the TPM's
  dictionary-attack lockout. The agent reports the refusal to the server (retrying that
  report, which uses no TPM) and stops; an operator fixes the key and restarts it.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from tpm2_pytss import TPM2_RC, TSS2_Exception

from attest.agent.http import (
    AgentApi,
    AgentApiError,
    PendingReadings,
    answer,
)
from attest.agent.tpm import Agent, AkKey

log = logging.getLogger("attest.agent")

BACKOFF_BASE_S = 1.0  # the first retry waits about this long
BACKOFF_CAP_S = 60.0  # and no retry waits longer
TPM_LAYER_SHIFT = 16  # a TSS return code's layer (0: the TPM itself) sits above bit 16
AUTH_REFUSALS = {
    int(TPM2_RC.AUTH_FAIL): "tpm_auth_fail",
    int(TPM2_RC.BAD_AUTH): "tpm_bad_auth",
    int(TPM2_RC.LOCKOUT): "tpm_lockout",
}


@dataclass
class Backoff:
    """Exponential backoff with jitter: the n-th consecutive failure waits a random time
    between half and all of min(cap, base * 2**n)."""

    base_s: float = BACKOFF_BASE_S
    cap_s: float = BACKOFF_CAP_S
    rng: random.Random = field(default_factory=random.Random)
    failures: int = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap_s, self.base_s * 2**self.failures)
        self.failures += 1
        return ceiling / 2 + self.rng.uniform(0, ceiling / 2)

    def reset(self) -> None:
        self.failures = 0


class AuthorisationRefused(RuntimeError):
    """The TPM refused an authorisation: retrying would count toward its DA lockout."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code, self.detail = code, detail


def auth_refusal(exc: BaseException) -> AuthorisationRefused | None:
    """The TPM's authorisation refusal in `exc`, or None when it is something else."""
    if not isinstance(exc, TSS2_Exception) or exc.rc >> TPM_LAYER_SHIFT:
        return None
    code = AUTH_REFUSALS.get(int(exc.error))
    return AuthorisationRefused(code, str(exc)) if code else None


@dataclass
class AgentLoop:
    """One node's agent. `open_tpm` opens the TPM (again after it restarted); `load_ak`
    enrols or loads the AK with an open TPM; `on_verdict` sees each verdict with the TPM."""

    open_tpm: Callable[[], Agent]
    api: AgentApi
    load_ak: Callable[[Agent, AgentApi], AkKey]
    interval_s: float
    stop: threading.Event
    read_counters: Callable[[], str] | None = None
    on_verdict: Callable[[Agent, dict[str, Any]], None] | None = None
    on_error: Callable[[BaseException], None] | None = None
    backoff: Backoff = field(default_factory=Backoff)
    name: str = "agent"
    rounds: int = 0  # stop after this many verdicts (0: never)
    follow_server: bool = False  # wait the interval_s the server's challenge asks for
    refused: AuthorisationRefused | None = None
    verdicts: int = 0

    def run(self) -> AuthorisationRefused | None:
        """Until `stop` is set or the TPM refuses an authorisation (then reported, returned)."""
        pending = PendingReadings(self.read_counters)
        tpm: Agent | None = None
        ak: AkKey | None = None
        try:
            while not self.stop.is_set():
                try:
                    tpm = tpm or self.open_tpm()
                    ak = ak or self.load_ak(tpm, self.api)
                    verdict = answer(tpm, self.api, ak, pending)
                    self.verdicts += 1
                    if self.on_verdict:
                        self.on_verdict(tpm, verdict)
                    self.backoff.reset()
                    if self.follow_server and isinstance(verdict.get("interval_s"), int | float):
                        self.interval_s = float(verdict["interval_s"])
                    if self.rounds and self.verdicts >= self.rounds:
                        return None
                    wait = self.interval_s
                except Exception as exc:  # each kind is sorted below
                    refused = auth_refusal(exc)
                    if refused is not None:
                        self.refused = refused
                        self._report(refused)
                        return refused
                    if isinstance(exc, TSS2_Exception) and tpm is not None:
                        tpm = self._close(tpm)  # the TPM restarted or dropped us: reopen
                    if not isinstance(exc, (AgentApiError, OSError, ValueError, TSS2_Exception)):
                        log.exception("%s: unexpected failure, retrying", self.name)
                    wait = self.backoff.next_delay()
                    log.warning("%s: %s; retrying in %.1f s", self.name, exc, wait)
                    if self.on_error:
                        self.on_error(exc)
                self.stop.wait(wait)
        finally:
            if tpm is not None:
                self._close(tpm)
        return None

    def _report(self, refused: AuthorisationRefused) -> None:
        """Tell the server why this node stops attesting; this uses no TPM, so it is retried
        (with backoff) until the server has it or the agent is stopped."""
        log.error("%s: the TPM refused an authorisation; not retrying: %s", self.name, refused)
        while not self.stop.is_set():
            try:
                self.api.post("report/", {"code": refused.code, "detail": refused.detail})
                return
            except (AgentApiError, OSError, ValueError) as exc:
                wait = self.backoff.next_delay()
                log.warning("%s: report not delivered (%s); again in %.1f s", self.name, exc, wait)
                self.stop.wait(wait)

    @staticmethod
    def _close(tpm: Agent) -> None:
        with suppress(Exception):  # a dead connection may fail to close
            tpm.close()
