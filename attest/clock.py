"""The one policy for a TPM's clock across restarts and power loss (docs/attestation.md,
"The TPM clock after a power loss"). The app's verifier and the contract both reach it
through `verify_quote`, so they cannot disagree.

Freshness never comes from the TPM clock: it comes from the ledger's single-use nonce. The
clock, resetCount and restartCount only detect a rolled-back TPM (a restored state, a
replayed boot), by comparison with the node's last recorded valid attestation:

- resetCount lower than recorded: refused (`reset_count_decreased`);
- same resetCount, restartCount lower: refused (`restart_count_decreased`);
- same boot (both counts equal), clock lower: refused (`clock_went_backwards`);
- the TPM booted since (a count went up) and `safe` is NO, or its clock is lower than
  recorded: accepted, and recorded as a power loss (`tpm_power_loss`, information). The TPM
  restarted without an orderly shutdown, so the clock it had not yet saved is gone. `safe`
  alone cannot tell: a TPM sets it again at its next clock save (swtpm within seconds, a
  hardware TPM within about an hour), possibly before its first quote after the restart;
  a clock below the recorded one after a boot is that same lost time;
- the TPM booted since, clock not lower, `safe` YES: accepted (`tpm_rebooted`, information);
- `safe` NO otherwise (no record to compare with, or the same boot as the record, whose
  clock the TPM has not saved yet): accepted, stated (`clock_not_safe`, information).

A rollback of the TPM's state (a restored state file, a cleared TPM) shows in its counts,
which the TPM alone increments: they are never accepted going back.
"""

from __future__ import annotations

from attest.verdict import SEVERITY_INFO, ClockInfo, Reason

POWER_LOSS = "tpm_power_loss"  # the event code the node page and the ledger record show
REBOOTED = "tpm_rebooted"
CLOCK_NOT_SAFE = "clock_not_safe"
ROLLBACK_CODES = ("reset_count_decreased", "restart_count_decreased", "clock_went_backwards")


def judge(now: ClockInfo, previous: ClockInfo | None) -> list[Reason]:
    """Why `now` (a quote's clock) fails or what it tells, given the node's last recorded
    clock (`previous`, None when the node has none since its enrolment)."""
    if previous is None:
        return (
            [_unsafe("there is no recorded attestation to compare it with")] if not now.safe else []
        )
    rollback = _rollback(now, previous)
    if rollback is not None:
        return [rollback]
    booted = (now.reset_count, now.restart_count) != (previous.reset_count, previous.restart_count)
    if booted and (not now.safe or now.clock < previous.clock):
        return [
            Reason(
                POWER_LOSS,
                f"the TPM restarted without an orderly shutdown (resetCount "
                f"{previous.reset_count} -> {now.reset_count}, restartCount "
                f"{previous.restart_count} -> {now.restart_count}, clock {previous.clock} -> "
                f"{now.clock} ms, {'safe again' if now.safe else 'not safe'}): accepted as a "
                "power loss; the quote is fresh by the ledger's nonce",
                SEVERITY_INFO,
            )
        ]
    if booted:
        return [
            Reason(
                REBOOTED,
                f"the TPM started again (resetCount {previous.reset_count} -> "
                f"{now.reset_count}, restartCount {previous.restart_count} -> "
                f"{now.restart_count}) with no reported clock value lost",
                SEVERITY_INFO,
            )
        ]
    return [] if now.safe else [_unsafe("the clock is monotonic since the last recorded quote")]


def _rollback(now: ClockInfo, previous: ClockInfo) -> Reason | None:
    if now.reset_count < previous.reset_count:
        return Reason(
            "reset_count_decreased",
            f"resetCount {now.reset_count} < recorded {previous.reset_count}: the TPM's state "
            "was rolled back or cleared",
        )
    same_reset = now.reset_count == previous.reset_count
    if same_reset and now.restart_count < previous.restart_count:
        return Reason(
            "restart_count_decreased",
            f"restartCount {now.restart_count} < recorded {previous.restart_count} with the "
            f"same resetCount {now.reset_count}: the TPM's state was rolled back",
        )
    same_boot = same_reset and now.restart_count == previous.restart_count
    if same_boot and now.clock < previous.clock:
        return Reason(
            "clock_went_backwards",
            f"clock {now.clock} ms < recorded {previous.clock} ms in the same boot "
            f"(resetCount {now.reset_count}, restartCount {now.restart_count}): rolled back",
        )
    return None


def _unsafe(context: str) -> Reason:
    return Reason(
        CLOCK_NOT_SAFE,
        f"the TPM clock is not marked safe (it restarted without an orderly shutdown and has "
        f"not saved its clock since); {context}; the quote is fresh by the ledger's nonce",
        SEVERITY_INFO,
    )


def is_power_loss(reasons: list[dict]) -> bool:
    """Whether a stored verdict's reasons ({code, ...} dicts) record a power loss."""
    return any(isinstance(r, dict) and r.get("code") == POWER_LOSS for r in reasons)
