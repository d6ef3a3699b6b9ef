"""What the kernel knows about permissions without knowing any app's callers."""

from __future__ import annotations

from rest_framework import permissions


class ScopedWritePermission(permissions.BasePermission):
    """A permission that lets any caller read and refuses some writes with 403 (a key
    without the write scope). The OpenAPI schema lists 403 on the writes of views using one."""
