from __future__ import annotations

from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponseForbidden, JsonResponse
from django.shortcuts import render

from webapp.dashboard.access import may_view
from webapp.dashboard.snapshot import snapshot


def _login_required(request):
    """Staff only: anyone else is sent to log in, or refused once logged in."""
    if may_view(request.user):
        return None
    if request.user.is_authenticated:
        return HttpResponseForbidden("the dashboard is for operators (staff) only")
    return redirect_to_login(request.get_full_path())


def overview(request):
    return _login_required(request) or render(
        request, "dashboard/overview.html", {"snap": snapshot()}
    )


def data(request):
    return _login_required(request) or JsonResponse(snapshot())
