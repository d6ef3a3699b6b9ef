from __future__ import annotations

from django.db import models


class AuditEvent(models.Model):
    """One row per write action: who did what to which object, with the details."""

    created = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.CharField(max_length=200, help_text="user, tenant key prefix or worker")
    action = models.CharField(max_length=100, db_index=True)
    object_type = models.CharField(max_length=50)
    object_id = models.CharField(max_length=100, db_index=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id"])]

    def __str__(self) -> str:
        when = f"{self.created:%Y-%m-%d %H:%M:%S}"
        return f"{when} {self.actor} {self.action} {self.object_type}:{self.object_id}"
