"""The operator's dashboards over time: staff only, each a page that draws its plots from
its data.json for the chosen range and follows the websocket for live changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from webapp.dashboard import capacity, ledger_series, nodes, series
from webapp.dashboard.ranges import RANGES, BadRange, Range, parse_range
from webapp.dashboard.strings import page_strings
from webapp.fleet import rate_card
from webapp.fleet.models import Node

BAD_REQUEST = 400

PAGES: dict[str, tuple[str, Callable[[Range], dict[str, Any]]]] = {
    "utilisation": (gettext_lazy("Utilisation over time"), series.utilisation),
    "cost": (gettext_lazy("Cost over time"), series.cost),
    "ledger": (gettext_lazy("Ledger"), ledger_series.ledger_page),
    "capacity": (
        gettext_lazy("Idle capacity"),
        lambda rng: {"heatmap": capacity.idle_heatmap(), "advice": capacity.scaling_advice()},
    ),
}


def _context(page: str, title: object) -> dict[str, Any]:
    return {
        "page": page,
        "title": title,
        "source": "data.json",  # each page's data, relative to it
        "ranges": list(RANGES),
        "nodes": Node.objects.order_by("name").values_list("name", "trust"),
        "strings": page_strings(rate_card.currency()),
    }


def _json(request: HttpRequest, build: Callable[[Range], dict[str, Any]]) -> JsonResponse:
    try:
        rng = parse_range(request.GET.get("range"))
    except BadRange as exc:
        return JsonResponse({"detail": str(exc)}, status=BAD_REQUEST)
    return JsonResponse(build(rng))


@staff_member_required
def page(request: HttpRequest, name: str) -> HttpResponse:
    if name not in PAGES:
        return HttpResponse(status=404)
    title = PAGES[name][0]
    return render(request, f"dashboard/ops_{name}.html", _context(name, title))


@staff_member_required
def data(request: HttpRequest, name: str) -> JsonResponse:
    if name not in PAGES:
        return JsonResponse({"detail": f"no dashboard {name!r}"}, status=404)
    return _json(request, PAGES[name][1])


@staff_member_required
def node_page(request: HttpRequest, name: str) -> HttpResponse:
    node = get_object_or_404(Node, name=name)
    context = _context("node", _("Node %(name)s") % {"name": node.name})
    events = node.events.all()[: nodes.MAX_EVENTS_SHOWN]
    return render(request, "dashboard/ops_node.html", {**context, "node": node, "events": events})


@staff_member_required
def node_data(request: HttpRequest, name: str) -> JsonResponse:
    node = get_object_or_404(Node.objects.select_related("site", "pcr_policy"), name=name)
    return _json(request, lambda rng: nodes.node_page(node, rng))
