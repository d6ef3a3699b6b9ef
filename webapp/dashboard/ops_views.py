"""The operator's dashboards over time: staff only, each a page that draws its plots from
its data.json for the chosen range and follows the websocket for live changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.admin.views.decorators import staff_member_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from webapp.cluster import selectors as cluster_state
from webapp.dashboard import capacity, drill, fleet, ledger_series, nodes, series
from webapp.dashboard.ranges import RANGES, BadRange, Range, parse_range
from webapp.dashboard.strings import page_strings
from webapp.fleet import rate_card
from webapp.fleet.models import GPU, Generation, Node, Site

BAD_REQUEST = 400

PAGES: dict[str, tuple[str, Callable[[Range], dict[str, Any]]]] = {
    "fleet": (gettext_lazy("Fleet"), fleet.fleet_page),
    "utilisation": (gettext_lazy("Utilisation over time"), series.utilisation),
    "cost": (gettext_lazy("Cost over time"), series.cost),
    "ledger": (gettext_lazy("Ledger"), ledger_series.ledger_page),
    "capacity": (
        gettext_lazy("Idle capacity"),
        lambda rng: {"heatmap": capacity.idle_heatmap(), "advice": capacity.scaling_advice()},
    ),
}


def _context(page: str, title: object, crumbs: list[tuple[str, str]] = ()) -> dict[str, Any]:
    """What every operator page shows: its title, ranges and strings, and the way back up
    (fleet > site > pool > node > GPU) as (label, url) pairs; no list of every node, which a
    fleet has too many of for one page."""
    return {
        "page": page,
        "title": title,
        "source": "data.json",  # each page's data, relative to it
        "ranges": list(RANGES),
        "crumbs": [(_("Fleet"), reverse("ops-page", args=["fleet"])), *crumbs],
        "strings": page_strings(rate_card.currency()),
    }


def _site_crumb(site: str) -> tuple[str, str]:
    return site, reverse("ops-site", args=[site])


def _pool_crumb(site: str, generation: str) -> tuple[str, str]:
    return generation, reverse("ops-pool", args=[site, generation])


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
    node = get_object_or_404(Node.objects.select_related("site"), name=name)
    pools = node.gpus.values_list("generation__catalogue_id", flat=True).distinct()
    crumbs = [_site_crumb(node.site.name), *(_pool_crumb(node.site.name, g) for g in pools)]
    context = _context("node", _("Node %(name)s") % {"name": node.name}, crumbs)
    events = node.events.all()[: nodes.MAX_EVENTS_SHOWN]
    view = cluster_state.side_by_side([node])
    return render(
        request,
        "dashboard/ops_node.html",
        {**context, "node": node, "events": events, "cluster": view, "gate": view.nodes[node.name]},
    )


@staff_member_required
def node_data(request: HttpRequest, name: str) -> JsonResponse:
    node = get_object_or_404(Node.objects.select_related("site", "pcr_policy"), name=name)
    return _json(request, lambda rng: nodes.node_page(node, rng))


@staff_member_required
def site_page(request: HttpRequest, site: str) -> HttpResponse:
    found = get_object_or_404(Site, name=site)
    context = _context("site", _("Site %(name)s") % {"name": found.name})
    return render(request, "dashboard/ops_site.html", context)


@staff_member_required
def site_data(request: HttpRequest, site: str) -> JsonResponse:
    found = get_object_or_404(Site, name=site)
    return _json(request, lambda rng: fleet.site_page(found, rng))


def _pool(site: str, generation: str) -> tuple[Site, Generation]:
    found = get_object_or_404(Site, name=site)
    gen = get_object_or_404(Generation, catalogue_id=generation)
    if not GPU.objects.filter(node__site=found, generation=gen).exists():
        raise Http404(f"no {generation} GPUs at {site}")
    return found, gen


@staff_member_required
def pool_page(request: HttpRequest, site: str, generation: str) -> HttpResponse:
    found, gen = _pool(site, generation)
    title = _("Pool %(generation)s at %(site)s") % {"generation": gen, "site": found.name}
    context = _context("pool", title, [_site_crumb(found.name)])
    return render(request, "dashboard/ops_pool.html", context)


@staff_member_required
def pool_data(request: HttpRequest, site: str, generation: str) -> JsonResponse:
    found, gen = _pool(site, generation)
    try:
        number = int(request.GET.get("page") or 1)
    except ValueError:
        return JsonResponse(
            {"detail": f"page={request.GET['page']!r} is not a number"}, status=BAD_REQUEST
        )
    return _json(request, lambda rng: drill.pool_page(found, gen, rng, number))


def _gpu(uuid: str) -> GPU:
    return get_object_or_404(GPU.objects.select_related("node__site", "generation"), uuid=uuid)


@staff_member_required
def gpu_page(request: HttpRequest, uuid: str) -> HttpResponse:
    gpu = _gpu(uuid)
    site, generation = gpu.node.site.name, gpu.generation.catalogue_id
    crumbs = [
        _site_crumb(site),
        _pool_crumb(site, generation),
        (gpu.node.name, reverse("ops-node", args=[gpu.node.name])),
    ]
    title = _("GPU %(node)s/%(index)s") % {"node": gpu.node.name, "index": gpu.index}
    return render(request, "dashboard/ops_gpu.html", _context("gpu", title, crumbs))


@staff_member_required
def gpu_data(request: HttpRequest, uuid: str) -> JsonResponse:
    gpu = _gpu(uuid)
    return _json(request, lambda rng: drill.gpu_page(gpu, rng))
