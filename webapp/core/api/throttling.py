"""Request budgets (REST_FRAMEWORK's DEFAULT_THROTTLE_CLASSES and DEFAULT_THROTTLE_RATES):
one per caller (an API key, or a node agent's credential) and one per client address, plus
a budget of failed authentications per address that is checked before any key is looked
at, so guessing keys ends in 429s. Over budget: 429 with `Retry-After`.

Every scope is counted by `webapp.core.budgets` (a sliding window, one atomic step per
check): in Redis when REDIS_URL is set, so every worker process shares the budgets and
racing workers cannot both take the last hit; otherwise each process counts alone. Rates are
read from the settings on every request (DRF's own throttles bind them at import)."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from rest_framework import exceptions
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from webapp.core import budgets

KEY_SCOPE = "key"  # a tenant's API key
NODE_SCOPE = "node"  # a node agent (its attestation traffic)
IP_SCOPE = "ip"  # every request from one client address
AUTH_FAILURE_SCOPE = "auth_failure"  # failed authentications from one client address

PERIOD_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}  # DRF's rate periods, by first letter


def spend(scope: str, ident: object) -> budgets.Take:
    """Take one hit of `scope`'s budget for `ident` at the rate the settings give now (a
    scope without a rate is not limited)."""
    rate = api_settings.DEFAULT_THROTTLE_RATES.get(scope)
    if rate is None:
        return budgets.Take(allowed=True)
    count, period = rate.split("/")
    return budgets.store().take(_key(scope, ident), int(count), PERIOD_S[period[0]])


def _key(scope: str, ident: object) -> str:
    return f"{scope}:{ident}"


def client_address(request: Any) -> str:
    """The client's address as DRF's throttles see it (NUM_PROXIES decides whether
    X-Forwarded-For is trusted)."""
    return BaseThrottle().get_ident(request)


class _Budgeted(BaseThrottle):
    taken = budgets.Take(allowed=True)

    def _spend(self, scope: str, ident: object) -> bool:
        self.taken = spend(scope, ident)
        return self.taken.allowed

    def wait(self) -> float | None:
        return self.taken.retry_after_s or None


class CallerRateThrottle(_Budgeted):
    """One budget per authenticated caller: principals name theirs in `throttle_scope` and
    `throttle_ident`."""

    def allow_request(self, request: Any, view: Any) -> bool:
        scope = getattr(request.user, "throttle_scope", None)
        if scope is None:
            return True
        return self._spend(scope, request.user.throttle_ident)


class ClientAddressRateThrottle(_Budgeted):
    def allow_request(self, request: Any, view: Any) -> bool:
        return self._spend(IP_SCOPE, client_address(request))


class AuthFailureBudget:
    """Failed authentications per client address, around the check of one credential:

        with AuthFailureBudget(request):
            ...  # raise AuthenticationFailed for a bad credential

    Entering takes a hit of the address's budget, before any key is looked at (429 when
    none is left); the hit stays only when the block raised AuthenticationFailed, and is
    given back otherwise. Taking first is what makes the budget hold when guesses race each
    other in several workers: each one needs a hit of its own before it may try."""

    def __init__(self, request: Any) -> None:
        self.ident = client_address(request)

    def __enter__(self) -> AuthFailureBudget:
        self.taken = spend(AUTH_FAILURE_SCOPE, self.ident)
        if not self.taken.allowed:
            raise exceptions.Throttled(
                self.taken.retry_after_s,
                detail="[auth.throttled] too many failed authentications from this address",
            )
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        failed = kind is not None and issubclass(kind, exceptions.AuthenticationFailed)
        if self.taken.hit is not None and not failed:
            budgets.store().give_back(_key(AUTH_FAILURE_SCOPE, self.ident), self.taken.hit)
