"""Reading /metrics the way Prometheus does (prometheus-client's own text parser), and a
placed lease for the tests that need one."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from prometheus_client.parser import text_string_to_metric_families

from tests.webapp.helpers import place
from webapp.leasing import actions
from webapp.leasing.models import Lease

ACTOR = "test"

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Series:
    """Every sample of an exposition, keyed by (sample name, sorted labels)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(series: Series, name: str, **labels: str) -> float:
    """One sample's value; 0 when the series does not exist (yet)."""
    return series.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape(client) -> Series:  # type: ignore[no-untyped-def]
    response = client.get("/metrics")
    assert response.status_code == 200, response.status_code
    return parse(response.content.decode())


def place_one_gpu_lease(tenant, gpus: Sequence, attestations: Sequence) -> Lease:  # type: ignore[no-untyped-def]
    """A one-GPU lease requested and placed on `gpus[0]` at rate-card terms: it queues
    CreateLease."""
    lease = actions.request_lease(
        tenant, gpu_count=1, precision="FP16", hours=Decimal(1), actor=ACTOR
    )
    return place(lease, gpus[:1], attestations, actor=ACTOR)
