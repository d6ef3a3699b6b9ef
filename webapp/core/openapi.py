"""The OpenAPI schema: every operation lists the errors it can answer, in one place.

Every error has the API's one shape (webapp/core/api/errors.py): `{"detail": "...", "code":
"...", "fields": {...}}`, `fields` only for input that failed validation. Which errors an
operation can return follows from the view: authenticated
views can answer 401, writes 403 (a read-only key), paths with an id 404, requests with a
body or query parameters 400, a body over DATA_UPLOAD_MAX_MEMORY_SIZE 413, throttled views 429.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, inline_serializer
from rest_framework import serializers

from webapp.core.api.permissions import ScopedWritePermission

API_PREFIX = "/api/v1/"
UNSAFE_METHODS = ("POST", "PUT", "PATCH", "DELETE")

# The API's one error format (webapp/core/api/errors.py), for every error status.
ERROR = inline_serializer(
    name="Error",
    fields={
        "detail": serializers.CharField(help_text="what went wrong, one readable sentence"),
        "code": serializers.CharField(help_text="a stable code (e.g. invalid, not_found)"),
        "fields": serializers.DictField(
            child=serializers.ListField(child=serializers.CharField()),
            required=False,
            help_text="input that failed validation only: each rejected field (or "
            "non_field_errors) with its messages",
        ),
    },
)
ERROR_DESCRIPTIONS = {
    400: "the request failed validation: each rejected field with the rule it broke",
    401: "no API key, or an invalid, revoked or expired one",
    403: "the key may not do this (read-only key for a write)",
    404: "no such object for this tenant",
    413: "the request body is over the size limit (REQUEST_BODY_MAX_BYTES, default 1 MiB)",
    429: "too many requests: retry after the Retry-After header's seconds",
}


def only_versioned_paths(endpoints: list[tuple], **_: Any) -> list[tuple]:
    """Preprocessing hook: the schema documents /api/v1/ only; older paths redirect there
    (the node agents' /api/agent/ is kept for agents in the field, undocumented)."""
    return [endpoint for endpoint in endpoints if endpoint[0].startswith(API_PREFIX)]


def _refuses_writes(permission: type) -> bool:
    return isinstance(permission, type) and issubclass(permission, ScopedWritePermission)


class ErrorsAutoSchema(AutoSchema):
    """AutoSchema that adds the error responses an operation can give to its own."""

    def _error_codes(self) -> dict[int, Any]:
        view = self.view
        codes: dict[int, Any] = {}
        if getattr(view, "authentication_classes", None):
            codes[401] = ERROR
        if self.method in UNSAFE_METHODS:
            codes[400] = ERROR
            codes[413] = ERROR  # the body parser's limit (webapp.core.api.parsers)
            if any(_refuses_writes(p) for p in getattr(view, "permission_classes", ())):
                codes[403] = ERROR
        if "{" in self.path:
            codes[404] = ERROR
        if self.method == "GET" and (self._get_filter_parameters() or self._query_parameters()):
            codes[400] = ERROR
        if getattr(view, "throttle_classes", None):
            codes[429] = ERROR
        return codes

    def _query_parameters(self) -> list[OpenApiParameter]:
        """The query parameters an operation declares itself (`extend_schema(parameters=)`):
        a value it cannot read is a 400, as for a filter."""
        return [
            p
            for p in self.get_override_parameters()
            if isinstance(p, OpenApiParameter) and p.location == OpenApiParameter.QUERY
        ]

    def _get_response_bodies(self, direction: str = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        for code, serializer in sorted(self._error_codes().items()):
            if str(code) not in responses:
                described = OpenApiResponse(serializer, ERROR_DESCRIPTIONS[code])
                responses[str(code)] = self._get_response_for_code(described, str(code))
        return responses
