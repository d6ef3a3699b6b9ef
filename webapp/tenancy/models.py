from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone

from webapp.core import tokens

KEY_PREFIX = "wl"  # every key starts with this, so a leaked one is easy to grep for

# What a tenant may hold and ask for until an operator grants more.
DEFAULT_MAX_GPUS = 16  # GPUs held or waited for, over all its open leases
DEFAULT_MAX_QUEUED_REQUESTS = 10  # leases waiting for placement
DEFAULT_MAX_PRIORITY = 0  # above 0 a lease may preempt others: an operator's grant


class Tenant(models.Model):
    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=100, unique=True)
    created = models.DateTimeField(auto_now_add=True)
    max_gpus = models.PositiveIntegerField(
        default=DEFAULT_MAX_GPUS, help_text="GPUs this tenant may hold or wait for at once"
    )
    max_queued_requests = models.PositiveIntegerField(
        default=DEFAULT_MAX_QUEUED_REQUESTS, help_text="lease requests that may wait at once"
    )
    max_priority = models.SmallIntegerField(
        default=DEFAULT_MAX_PRIORITY,
        help_text="highest priority this tenant's leases may ask for; above 0 they may "
        "preempt lower-priority leases (and pay the priority premium)",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def cluster_account(self) -> str:
        """The tenant's account on the cluster (a Slurm account): its slug."""
        return self.slug


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

    @classmethod
    def issue(
        cls, tenant: Tenant, scope: str = READ, name: str = "", expires: datetime | None = None
    ) -> tuple[ApiKey, str]:
        """Create a key; returns it with the full token, which is shown once and never stored."""
        new = tokens.new_token(KEY_PREFIX)
        key = cls.objects.create(
            tenant=tenant,
            name=name,
            prefix=new.prefix,
            digest=new.digest,
            scope=scope,
            expires=expires,
        )
        return key, new.token

    def matches(self, secret: str) -> bool:
        return tokens.matches(self.digest, secret)

    def is_usable(self, now: datetime | None = None) -> bool:
        now = now or timezone.now()
        return not self.revoked and (self.expires is None or self.expires > now)


class Membership(models.Model):
    """A login's place in a tenant, for the tenant console. An owner may request, end and
    migrate leases; a member reads (the console's twin of a write and a read API key)."""

    OWNER = "owner"
    MEMBER = "member"
    ROLES = [(OWNER, "owner: reads and writes"), (MEMBER, "member: reads")]

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="membership"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="members")
    role = models.CharField(max_length=6, choices=ROLES, default=MEMBER)
    # the member's user on the operator's cluster (Slurm): a lease the member asks for is
    # held by this user there (docs/operations.md, "Tenants and cluster users")
    cluster_user = models.CharField(
        max_length=32,
        blank=True,
        help_text="the member's user name on the cluster (Slurm); a cluster user belongs "
        "to one tenant",
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant", "user"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster_user"],
                condition=~models.Q(cluster_user=""),
                name="membership_unique_cluster_user",
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} ({self.tenant}, {self.role})"

    @property
    def can_write(self) -> bool:
        return self.role == self.OWNER
