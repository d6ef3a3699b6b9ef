"""Who may open a console page: a login that is a member of a tenant. The membership is the
principal every query is restricted by (webapp.tenancy.querysets); writes need an owner."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import gettext as _

from webapp.tenancy.models import Membership

LOGIN_URL = "console-login"
FORBIDDEN = 403

View = Callable[..., HttpResponse]


def _refuse(request: HttpRequest, why: str) -> HttpResponse:
    return render(request, "console/forbidden.html", {"why": why}, status=FORBIDDEN)


def tenant_page(view: View) -> View:
    """Logged in and a member of a tenant; sets request.membership."""

    @login_required(login_url=LOGIN_URL)
    @wraps(view)
    def wrapped(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        membership = Membership.objects.select_related("tenant").filter(user=request.user)
        found = membership.first()
        if found is None:
            why = _("%(user)s is not a member of any tenant.") % {"user": request.user}
            return _refuse(request, why)
        request.membership = found  # type: ignore[attr-defined]
        return view(request, *args, **kwargs)

    return wrapped


def owner_action(view: View) -> View:
    """A tenant page that writes: POST only, and the member must be the tenant's owner."""

    @tenant_page
    @wraps(view)
    def wrapped(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        if request.method != "POST":
            return HttpResponse("use POST", status=405, headers={"Allow": "POST"})
        if not request.membership.can_write:  # type: ignore[attr-defined]
            return _refuse(request, _("Members read; only the tenant's owner may change leases."))
        return view(request, *args, **kwargs)

    return wrapped
