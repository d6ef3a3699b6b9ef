from __future__ import annotations

from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse, HttpResponseForbidden, JsonResponse
from django.shortcuts import render

from webapp.dashboard.access import may_view
from webapp.dashboard.snapshot import snapshot
from webapp.dashboard.strings import page_strings
from webapp.fleet import rate_card


def _login_required(request):
    """Staff only: anyone else is sent to log in, or refused once logged in."""
    if may_view(request.user):
        return None
    if request.user.is_authenticated:
        return HttpResponseForbidden("the dashboard is for operators (staff) only")
    return redirect_to_login(request.get_full_path())


def overview(request):
    return _login_required(request) or render(
        request,
        "dashboard/overview.html",
        {"snap": snapshot(), "strings": page_strings(rate_card.currency())},
    )


def data(request):
    return _login_required(request) or JsonResponse(snapshot())


# Browsers ask every site for /favicon.ico (the admin's pages name none): a small mark, so no
# page logs a 404 for it.
FAVICON_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
    '<rect width="16" height="16" rx="3" fill="#14324a"/>'
    '<path d="M3 4l2 8 3-6 3 6 2-8" stroke="#cfe6ff" fill="none" stroke-width="1.5"/></svg>'
)
FAVICON_MAX_AGE_S = 86_400


def favicon(request):
    response = HttpResponse(FAVICON_SVG, content_type="image/svg+xml")
    response["Cache-Control"] = f"max-age={FAVICON_MAX_AGE_S}"
    return response
