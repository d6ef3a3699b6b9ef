"""What the current request or job is about, for log lines: request id, tenant, lease and
ledger tx id. Context variables, so each thread and each asyncio task sees its own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

FIELDS = ("request_id", "tenant", "lease", "ledger_tx")
_vars: dict[str, ContextVar[str | None]] = {name: ContextVar(name, default=None) for name in FIELDS}


def current() -> dict[str, str | None]:
    return {name: var.get() for name, var in _vars.items()}


@contextmanager
def bound(**values: str | None) -> Iterator[None]:
    """Set some fields for the duration of a block (a request, an outbox row)."""
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown log context field(s) {sorted(unknown)}; known: {FIELDS}")
    tokens = [(_vars[name], _vars[name].set(value)) for name, value in values.items()]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def set_field(name: str, value: str | None) -> None:
    """Fill in a field learnt mid-request (the tenant, once the API key is checked)."""
    if name not in _vars:
        raise ValueError(f"unknown log context field {name!r}; known: {FIELDS}")
    _vars[name].set(value)
