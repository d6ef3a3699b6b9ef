"""Who may see the operator dashboard (every tenant's costs): staff only, over HTTP and
over its websocket. A development run may open it with DASHBOARD_LOGIN_REQUIRED=0."""

from __future__ import annotations

from typing import Any

from django.conf import settings


def may_view(user: Any) -> bool:
    if not settings.DASHBOARD_LOGIN_REQUIRED:
        return True
    return bool(user and user.is_authenticated and user.is_active and user.is_staff)
