from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime

from django.db import models
from django.utils import timezone

KEY_PREFIX = "wl"  # every key starts with this, so a leaked one is easy to grep for
PREFIX_BYTES = 6  # 8 url-safe characters: the public, stored-in-clear lookup part
SECRET_BYTES = 24  # 32 url-safe characters: stored only as a SHA-256 digest


class Tenant(models.Model):
    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=100, unique=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ApiKey(models.Model):
    READ = "read"
    WRITE = "write"
    SCOPES = [(READ, "read only"), (WRITE, "read and write")]

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    digest = models.CharField(max_length=64, editable=False)
    scope = models.CharField(max_length=5, choices=SCOPES, default=READ)
    expires = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["tenant", "-created"]

    def __str__(self) -> str:
        return f"{KEY_PREFIX}_{self.prefix}… ({self.tenant}, {self.scope})"

    @staticmethod
    def hash_secret(secret: str) -> str:
        return hashlib.sha256(secret.encode()).hexdigest()

    @classmethod
    def issue(
        cls, tenant: Tenant, scope: str = READ, name: str = "", expires: datetime | None = None
    ) -> tuple[ApiKey, str]:
        """Create a key; returns it with the full token, which is shown once and never stored."""
        prefix = secrets.token_urlsafe(PREFIX_BYTES)
        secret = secrets.token_urlsafe(SECRET_BYTES)
        key = cls.objects.create(
            tenant=tenant,
            name=name,
            prefix=prefix,
            digest=cls.hash_secret(secret),
            scope=scope,
            expires=expires,
        )
        return key, f"{KEY_PREFIX}_{prefix}.{secret}"

    def matches(self, secret: str) -> bool:
        return hmac.compare_digest(self.digest, self.hash_secret(secret))

    def is_usable(self, now: datetime | None = None) -> bool:
        now = now or timezone.now()
        return not self.revoked and (self.expires is None or self.expires > now)
