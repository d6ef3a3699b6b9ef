"""Pages of at most MAX_PAGE_SIZE rows, whatever `?limit=` asks for: an unbounded limit
reached the database as an integer it cannot hold.

The total (`count`) comes with the page, as a window function over the same query, so a page
costs one query rather than two (a COUNT and then the rows); only a page past the end asks
for the count alone."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, QuerySet, Window
from rest_framework.pagination import LimitOffsetPagination

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
MAX_OFFSET = 10**9  # past any real row count; keeps the SQL OFFSET inside a 64-bit integer
TOTAL_ROWS = "_page_total_rows"  # the window annotation's name on each row of the page


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    default_limit = DEFAULT_PAGE_SIZE
    max_limit = MAX_PAGE_SIZE

    def get_offset(self, request) -> int:
        return min(super().get_offset(request), MAX_OFFSET)

    def paginate_queryset(self, queryset, request, view=None) -> list[Any] | None:
        if not isinstance(queryset, QuerySet) or queryset.query.distinct:
            return super().paginate_queryset(queryset, request, view)
        self.request = request
        self.limit = self.get_limit(request)
        if self.limit is None:
            return None
        self.offset = self.get_offset(request)
        counted = queryset.annotate(**{TOTAL_ROWS: Window(Count("*"))})
        page = list(counted[self.offset : self.offset + self.limit])
        self.count = getattr(page[0], TOTAL_ROWS) if page else queryset.count()
        if self.count > self.limit and self.template is not None:
            self.display_page_controls = True
        return page
