"""Pages of at most MAX_PAGE_SIZE rows, whatever `?limit=` asks for: an unbounded limit
reached the database as an integer it cannot hold."""

from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
MAX_OFFSET = 10**9  # past any real row count; keeps the SQL OFFSET inside a 64-bit integer


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    default_limit = DEFAULT_PAGE_SIZE
    max_limit = MAX_PAGE_SIZE

    def get_offset(self, request) -> int:
        return min(super().get_offset(request), MAX_OFFSET)
