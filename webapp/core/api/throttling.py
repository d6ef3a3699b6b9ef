"""Request budgets (REST_FRAMEWORK's DEFAULT_THROTTLE_CLASSES and DEFAULT_THROTTLE_RATES):
one per caller (an API key, or a node agent's credential) and one per client address, plus
a budget of failed authentications per address that is checked before any key is looked
at, so guessing keys ends in 429s. Over budget: 429 with `Retry-After`.

Budgets live in Django's cache: Redis when REDIS_URL is set, so every worker process shares
them; otherwise each process counts alone."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

KEY_SCOPE = "key"  # a tenant's API key
NODE_SCOPE = "node"  # a node agent (its attestation traffic)
IP_SCOPE = "ip"  # every request from one client address
AUTH_FAILURE_SCOPE = "auth_failure"  # failed authentications from one client address


class _SettingsRate(SimpleRateThrottle):
    """Reads its rate from the current settings on every request (DRF binds it at import)."""

    def __init__(self) -> None:  # the rate is read per request in `_use_scope`
        pass

    def _use_scope(self, scope: str) -> None:
        self.scope = scope
        self.rate = api_settings.DEFAULT_THROTTLE_RATES.get(scope)
        self.num_requests, self.duration = self.parse_rate(self.rate)


class CallerRateThrottle(_SettingsRate):
    """One budget per authenticated caller: principals name theirs in `throttle_scope` and
    `throttle_ident`."""

    def allow_request(self, request: Any, view: Any) -> bool:
        scope = getattr(request.user, "throttle_scope", None)
        if scope is None:
            return True
        self._use_scope(scope)
        return super().allow_request(request, view)

    def get_cache_key(self, request: Any, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": request.user.throttle_ident}


class ClientAddressRateThrottle(_SettingsRate):
    def allow_request(self, request: Any, view: Any) -> bool:
        self._use_scope(IP_SCOPE)
        return super().allow_request(request, view)

    def get_cache_key(self, request: Any, view: Any) -> str:
        return self.cache_format % {"scope": IP_SCOPE, "ident": self.get_ident(request)}


class AuthFailureBudget(_SettingsRate):
    """Failed authentications per client address. `refuse_if_spent` before checking a
    credential, `record` after a failed one."""

    def __init__(self, request: Any) -> None:
        self._use_scope(AUTH_FAILURE_SCOPE)
        self.key = self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def _recent(self) -> list[float]:
        self.now = self.timer()
        self.history = [t for t in self.cache.get(self.key, []) if t > self.now - self.duration]
        return self.history

    def refuse_if_spent(self) -> None:
        if self.num_requests is not None and len(self._recent()) >= self.num_requests:
            raise exceptions.Throttled(
                self.wait(),
                detail="[auth.throttled] too many failed authentications from this address",
            )

    def record(self) -> None:
        history = self._recent()
        history.insert(0, self.now)
        self.cache.set(self.key, history, self.duration)
