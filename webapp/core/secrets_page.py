"""One-time secrets (new API keys, node credentials) shown once, on the page that answers
the action that made them: never in the `messages` cookie (signed, not encrypted), never
cached, and never stored anywhere but as a digest."""

from __future__ import annotations

from collections.abc import Sequence

from django.contrib.admin import site
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.cache import add_never_cache_headers

TEMPLATE = "admin/one_time_secrets.html"


def show_once(
    request: HttpRequest, title: str, secrets: Sequence[tuple[str, str]]
) -> TemplateResponse:
    """The page listing `secrets` as (what it is for, the secret) pairs."""
    context = {
        **site.each_context(request),
        "title": title,
        "secrets": list(secrets),
        "back": request.get_full_path(),
    }
    response = TemplateResponse(request, TEMPLATE, context)
    add_never_cache_headers(response)
    return response
