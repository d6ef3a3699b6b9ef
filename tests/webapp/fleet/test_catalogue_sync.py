"""The web app's generations and lease precisions follow the versioned catalogue: every
generation and every dense figure is copied, and a lease may ask for any catalogue
precision that an attested GPU supports."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from scheduler.catalogue import PRECISIONS, load_catalogue
from webapp.fleet.catalogue import sync_catalogue
from webapp.fleet.models import Generation
from webapp.leasing import actions, states
from webapp.leasing.models import Lease
from webapp.leasing.scheduling import place_requested

ACTOR = "test"


def test_every_generation_and_dense_figure_is_synced(db):
    catalogue = load_catalogue()
    assert sync_catalogue(catalogue) == len(catalogue.generations)
    for gen in catalogue.generations.values():
        row = Generation.objects.get(catalogue_id=gen.id)
        assert row.catalogue_version == catalogue.version
        assert {p: Decimal(v) for p, v in row.dense_tflops.items()} == gen.dense_tflops
        assert {p: Decimal(v) for p, v in row.sparse_tflops.items()} == gen.sparse_tflops
    l4 = Generation.objects.get(catalogue_id="L4")
    assert l4.watts_per_dense_tflops("INT8") == Decimal(72) / Decimal("242.5")
    assert Generation.objects.get(catalogue_id="B200-SXM-180GB").dense_tflops["FP64"] == "37"
    assert "FP64" not in Generation.objects.get(catalogue_id="L40S").dense_tflops


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_lease_accepts_every_catalogue_precision(tenant, precision):
    lease = Lease(tenant=tenant, gpu_count=1, precision=precision, hours=Decimal(1))
    lease.full_clean(exclude=["gpus", "attestations"])


def test_a_lease_refuses_a_precision_outside_the_catalogue(tenant):
    lease = Lease(tenant=tenant, gpu_count=1, precision="FP4", hours=Decimal(1))
    with pytest.raises(ValidationError, match="precision"):
        lease.full_clean(exclude=["gpus", "attestations"])


def test_an_fp64_tensor_lease_is_placed_and_priced_on_a100(fleet, tenant, attested_node):
    lease = actions.request_lease(
        tenant, gpu_count=1, precision="FP64_TENSOR", hours=Decimal(2), priority=0, actor=ACTOR
    )
    plan = place_requested(actor=ACTOR)
    assert [p.job for p in plan.placements] == [str(lease.pk)]
    lease.refresh_from_db()
    assert lease.state == states.PLACED and lease.price["precision"] == "FP64_TENSOR"
    # 2 V100 FP64 hours (7.8 TFLOPS) on an A100's 19.5 FP64 tensor TFLOPS: 0.8 h.
    assert Decimal(lease.price["lines"][0]["gpu_hours"]) == Decimal("0.8")
