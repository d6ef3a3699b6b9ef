"""The API's only body parser: JSON, held to the same size limit Django applies to forms
(DATA_UPLOAD_MAX_MEMORY_SIZE) and to the depth and text rules of `jsonbody`."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import exceptions, status
from rest_framework.parsers import BaseParser
from rest_framework.renderers import JSONRenderer

from webapp.core.api.jsonbody import JsonRefused, loads_bounded


class RequestBodyTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "body.too_large"


def _too_large(limit: int) -> RequestBodyTooLarge:
    return RequestBodyTooLarge(
        f"[body.too_large] the request body exceeds {limit} bytes (DATA_UPLOAD_MAX_MEMORY_SIZE)"
    )


class BoundedJSONParser(BaseParser):
    media_type = "application/json"
    renderer_class = JSONRenderer

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH", "") if request is not None else ""
        if declared.isdigit() and int(declared) > limit:
            raise _too_large(limit)
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise _too_large(limit)
        try:
            return loads_bounded(raw)
        except JsonRefused as refused:
            raise exceptions.ParseError(str(refused), code=refused.code) from None
