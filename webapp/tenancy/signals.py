"""What tenancy tells other apps without knowing them (observability listens)."""

from __future__ import annotations

from django.dispatch import Signal

# Sent with `key=` (an ApiKey) once a request's tenant key is checked: the request now acts
# for that key's tenant (observability puts the tenant into the request's log context).
key_authenticated = Signal()
