"""Observation of other apps through signals, so the domain apps carry no metrics, tracing or
log-context code and import nothing of observability: attestation verdicts are counted
(post_save), an outbox row queued inside a trace remembers it (post_save), each ledger
submission is timed, traced and logged (the outbox's `submitting`), and a request's tenant
joins its log context once its key is checked (tenancy's `key_authenticated`)."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save
from django.dispatch import receiver

from webapp.attestation.models import Attestation
from webapp.observability import context, tracing
from webapp.observability.metrics import ATTESTATION_VERDICTS
from webapp.observability.models import OutboxTrace
from webapp.observability.relay_watch import SubmitWatch
from webapp.outbox.models import OutboxEntry
from webapp.outbox.signals import submitting
from webapp.tenancy.models import ApiKey
from webapp.tenancy.signals import key_authenticated

VALID_REASON = "ok"  # the reason label of a valid verdict that gave no reason


@receiver(post_save, sender=Attestation, dispatch_uid="observability.attestation_verdict")
def count_verdict(sender: type, instance: Attestation, created: bool, **_: Any) -> None:
    if not created:
        return
    codes = {str(r.get("code")) for r in instance.reasons if isinstance(r, dict)} or {VALID_REASON}
    for code in sorted(codes):
        ATTESTATION_VERDICTS.labels(str(instance.valid).lower(), code).inc()


@receiver(post_save, sender=OutboxEntry, dispatch_uid="observability.outbox_trace")
def remember_trace(sender: type, instance: OutboxEntry, created: bool, **_: Any) -> None:
    if not created:
        return
    traceparent = tracing.current_traceparent()
    if traceparent:
        OutboxTrace.objects.create(entry=instance, traceparent=traceparent)


@receiver(submitting, sender=OutboxEntry, dispatch_uid="observability.submit_watch")
def watch_submission(sender: type, entry: OutboxEntry, **_: Any) -> SubmitWatch:
    return SubmitWatch(entry)


@receiver(key_authenticated, sender=ApiKey, dispatch_uid="observability.tenant_context")
def tenant_into_log_context(sender: type, key: ApiKey, **_: Any) -> None:
    context.set_field("tenant", key.tenant.slug)  # for this request's log lines
