"""Tenant API keys for DRF: `Authorization: Bearer wl_<prefix>.<secret>`.

The prefix finds the row; the secret is compared against its stored SHA-256 digest in
constant time. Every failure gives the same answer so a caller cannot probe for prefixes.
"""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from webapp.core import tokens
from webapp.core.api.permissions import ScopedWritePermission
from webapp.core.api.throttling import KEY_SCOPE, AuthFailureBudget
from webapp.tenancy.models import KEY_PREFIX, ApiKey
from webapp.tenancy.signals import key_authenticated

LAST_USED_RESOLUTION_S = 60  # don't write last_used on every request


class TenantPrincipal:
    """The authenticated caller of the tenant API: a tenant acting through one key."""

    is_authenticated = True
    throttle_scope = KEY_SCOPE

    def __init__(self, key: ApiKey) -> None:
        self.key = key
        self.tenant = key.tenant
        self.throttle_ident = key.prefix

    def __str__(self) -> str:
        return f"key {KEY_PREFIX}_{self.key.prefix} of {self.tenant.slug}"


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keywords = ("Bearer", "Token")

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0] not in self.keywords:
            return None
        with AuthFailureBudget(request):  # a failure keeps its hit of the address's budget
            key = self._key(header)
        key_authenticated.send(sender=ApiKey, key=key)  # observability: the log context
        now = timezone.now()
        if key.last_used is None or (now - key.last_used).total_seconds() > LAST_USED_RESOLUTION_S:
            ApiKey.objects.filter(pk=key.pk).update(last_used=now)
        return TenantPrincipal(key), key

    def _key(self, header: list[str]) -> ApiKey:
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <key>'.")
        parsed = tokens.parse(KEY_PREFIX, header[1])
        key = None
        if parsed:
            key = ApiKey.objects.select_related("tenant").filter(prefix=parsed[0]).first()
        if key is None or not key.matches(parsed[1]) or not key.is_usable():
            raise exceptions.AuthenticationFailed("Invalid, revoked or expired API key.")
        return key

    def authenticate_header(self, request):
        return "Bearer"


class ApiKeyScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI schema describes the key: a bearer token."""

    target_class = ApiKeyAuthentication
    name = "tenantApiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": f"{KEY_PREFIX}_<prefix>.<secret>",
        }


class HasTenantScope(ScopedWritePermission):
    """Any valid key may read; writing needs a key with the write scope."""

    message = "This API key is read-only; writing needs a key with the 'write' scope."

    def has_permission(self, request, view):
        principal = request.user
        if not isinstance(principal, TenantPrincipal):
            return False
        if request.method in permissions.SAFE_METHODS:
            return True
        return principal.key.scope == ApiKey.WRITE


class IsTenant(permissions.BasePermission):
    """Any valid key, for requests that compute an answer and change nothing (a POST that
    only reads, like the price preview)."""

    def has_permission(self, request, view):
        return isinstance(request.user, TenantPrincipal)
