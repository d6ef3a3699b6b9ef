"""The lease list's fast paths (webapp/core/api/serializers.py, pagination.py) answer exactly
what DRF's general paths answer, in fewer queries."""

from __future__ import annotations

import json
import re
from decimal import Decimal

from rest_framework import serializers
from rest_framework.utils.encoders import JSONEncoder

from tests.webapp import leases
from webapp.leasing.api.serializers import LeaseSerializer
from webapp.leasing.models import Lease


def _generic(instance: Lease) -> dict:
    """DRF's own ModelSerializer output, field by field."""
    return serializers.ModelSerializer.to_representation(LeaseSerializer(), instance)


def test_fast_lease_output_is_drfs_output(owner, fleet):
    settled = leases.settled(leases.active(owner.tenant, fleet.gpus[:2]))
    requested = Lease.objects.create(  # nulls, no GPUs, no settlements
        tenant=owner.tenant, gpu_count=1, precision="FP32", hours=Decimal("2.5")
    )
    for lease in Lease.objects.filter(pk__in=[settled.pk, requested.pk]).prefetch_related(
        "gpus", "settlements"
    ):
        fast = LeaseSerializer(lease).data
        assert fast == _generic(lease)
        assert list(fast) == list(_generic(lease))  # same keys, same order
    # the list prefetches into plain lists (webapp.core.api.serializers.prefetched)
    listed = owner.client.get("/api/v1/leases/").json()["results"]
    everyone = Lease.objects.filter(tenant=owner.tenant).order_by("-created")
    assert listed == [
        json.loads(json.dumps(_generic(lease), cls=JSONEncoder)) for lease in everyone
    ]
    served = owner.client.get(f"/api/v1/leases/{settled.pk}/").json()
    assert len(served["settlements"]) == 1 and len(served["gpus"]) == 2
    assert served["hours"] == "1.00" and served["started"].endswith("Z")


def _to_the_millisecond(document: dict) -> dict:
    """DRF writes a time to the microsecond, Django's JSON encoder to the millisecond."""
    return json.loads(re.sub(r'(\.\d{3})\d{3}Z"', r'\1Z"', json.dumps(document)))


def test_the_web_benchs_bare_baseline_answers_the_lists_document(owner, fleet, settings):
    """bench/bare_view.py is the web bench's measure of this stack without DRF: it must
    serve what the list serves, or the comparison measures less work."""
    leases.settled(leases.active(owner.tenant, fleet.gpus[:2]))
    Lease.objects.create(tenant=owner.tenant, gpu_count=1, precision="FP32", hours=Decimal("2.5"))
    listed = owner.client.get("/api/v1/leases/").json()
    settings.ROOT_URLCONF = "bench.bare_view"
    bare = owner.client.get("/bench/bare-leases/").json()
    assert [len(lease["gpus"]) for lease in listed["results"]] == [0, 2]
    assert [len(lease["settlements"]) for lease in listed["results"]] == [0, 1]
    assert _to_the_millisecond(bare) == _to_the_millisecond(listed)


def test_a_page_and_its_count_take_one_query(owner, django_assert_num_queries):
    Lease.objects.bulk_create(
        Lease(tenant=owner.tenant, gpu_count=1, precision="FP16", hours=1) for _ in range(7)
    )
    owner.client.get("/api/v1/leases/")  # the key's first use also writes its last_used
    # the key, the page with its count, the GPUs and the settlements of the page's leases
    with django_assert_num_queries(4):
        page = owner.client.get("/api/v1/leases/?limit=3&offset=2").json()
    assert page["count"] == 7 and len(page["results"]) == 3
    assert page["next"] and page["previous"]


def test_a_page_past_the_end_still_counts_every_row(owner):
    Lease.objects.bulk_create(
        Lease(tenant=owner.tenant, gpu_count=1, precision="FP16", hours=1) for _ in range(3)
    )
    page = owner.client.get("/api/v1/leases/?offset=50").json()
    assert page == {"count": 3, "next": None, "previous": page["previous"], "results": []}
    assert owner.client.get("/api/v1/leases/?state=settled").json()["count"] == 0


def test_the_count_is_the_filtered_tenants_own(owner, outsider):
    for caller, n in ((owner, 4), (outsider, 2)):
        Lease.objects.bulk_create(
            Lease(tenant=caller.tenant, gpu_count=1, precision="FP16", hours=1) for _ in range(n)
        )
    Lease.objects.filter(tenant=owner.tenant).update(state="settled")
    assert owner.client.get("/api/v1/leases/?state=settled").json()["count"] == 4
    assert owner.client.get("/api/v1/leases/?state=requested").json()["count"] == 0
    assert outsider.client.get("/api/v1/leases/").json()["count"] == 2
