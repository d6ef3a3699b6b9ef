from __future__ import annotations

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import JsonResponse
from django.shortcuts import render

from webapp.dashboard.snapshot import snapshot


def _login_required(request):
    if settings.DASHBOARD_LOGIN_REQUIRED and not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    return None


def overview(request):
    return _login_required(request) or render(
        request, "dashboard/overview.html", {"snap": snapshot()}
    )


def data(request):
    return _login_required(request) or JsonResponse(snapshot())
