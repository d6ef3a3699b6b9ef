"""Times in the viewer's time zone: the browser names its zone (IANA, e.g. Asia/Shanghai) in
the `tz` cookie, which console.js and the dashboard's script set from
Intl.DateTimeFormat; this middleware activates it for the request, so the `when` and
`interval` filters (webapp.core.templatetags.units) render local times and name the zone.
Without the cookie, or with a zone Python does not know, pages stay in UTC and say so."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

TZ_COOKIE = "tz"
MAX_ZONE_CHARS = 64  # the longest IANA name is 32 characters; anything longer is not one


def viewer_zone(request: HttpRequest) -> ZoneInfo | None:
    name = unquote(request.COOKIES.get(TZ_COOKIE, ""))  # zone.js encodes it (Asia%2FShanghai)
    if not name or len(name) > MAX_ZONE_CHARS or ".." in name or name.startswith("/"):
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


class ViewerTimezoneMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        zone = viewer_zone(request)
        if zone is None:
            timezone.deactivate()
        else:
            timezone.activate(zone)
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
