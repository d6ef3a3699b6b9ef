"""One error format for the whole API (REST_FRAMEWORK's EXCEPTION_HANDLER):

    {"detail": "<one readable sentence>", "code": "<stable code>", "fields": {...}}

`fields` appears only for input that failed validation: field name → its messages. Every
text is made UTF-8-safe, so echoing a caller's bad value can never break the response."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler

INVALID = "invalid"
API_PREFIX = "/api/"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # not an API error: Django's 500 handling (and logging) applies
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, exceptions.APIException):
        response.data = error_body(exc)
    return response


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's handler404: a URL no route matches. Under /api/ the answer is in the API's
    error format, elsewhere Django's own page."""
    if request.path.startswith(API_PREFIX):
        body = {"detail": f"no API route matches {_safe(request.path)}", "code": "not_found"}
        return JsonResponse(body, status=404)
    return defaults.page_not_found(request, exception)


def error_body(exc: exceptions.APIException) -> dict[str, Any]:
    detail, codes = exc.detail, exc.get_codes()
    if isinstance(detail, dict):
        general_key = api_settings.NON_FIELD_ERRORS_KEY
        fields = {_safe(str(k)): _messages(v) for k, v in detail.items() if k != general_key}
        general = _messages(detail.get(general_key, []))
        summary = "; ".join(general) or "invalid input: " + ", ".join(sorted(fields))
        return {"detail": summary, "code": INVALID, "fields": fields}
    if isinstance(detail, list):
        return {"detail": "; ".join(_messages(detail)), "code": _first_code(codes) or INVALID}
    code = codes if isinstance(codes, str) else exc.default_code
    return {"detail": _safe(str(detail)), "code": code}


def _messages(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [f"{_safe(str(k))}: {m}" for k, v in value.items() for m in _messages(v)]
    if isinstance(value, list):
        return [m for item in value for m in _messages(item)]
    return [_safe(str(value))]


def _first_code(codes: Any) -> str | None:
    if isinstance(codes, str):
        return codes
    if isinstance(codes, dict):
        codes = list(codes.values())
    for item in codes or []:
        found = _first_code(item)
        if found:
            return found
    return None


def _safe(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
