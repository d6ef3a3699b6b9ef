"""Observation of other apps' rows as they are written, through Django's post_save signal,
so the domain apps carry no metrics or tracing code: attestation verdicts are counted, and
an outbox row queued inside a trace remembers it."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save
from django.dispatch import receiver

from webapp.attestation.models import Attestation
from webapp.observability import tracing
from webapp.observability.metrics import ATTESTATION_VERDICTS
from webapp.observability.models import OutboxTrace
from webapp.outbox.models import OutboxEntry

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
