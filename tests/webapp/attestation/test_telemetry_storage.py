"""A quote's readings checked and stored once (webapp.attestation.telemetry.parse, keep): the
samples, a batch per GPU, and the live event the dashboards draw, from one look-up of the
readings' GPUs (a quote's cost at fleet size: bench/fleet_bench.py)."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection
from django.test.utils import CaptureQueriesContext

from webapp.attestation import telemetry
from webapp.attestation.models import Attestation, TelemetryBatch
from webapp.core.events import DASHBOARD_GROUP
from webapp.fleet.models import GPU, Node, TelemetrySample


def _rows(gpus, times) -> str:
    return "".join(f"{t},{g.uuid},{t * 300},300000,90,50,60\n" for g in gpus for t in times)


def test_a_quotes_readings_look_up_their_gpus_once_and_reach_the_dashboards(
    fleet, django_capture_on_commit_callbacks
):
    gpus = [g for g in fleet.gpus if g.node_id == fleet.node.pk][:2]
    attestation = Attestation.objects.create(
        node=fleet.node, nonce="n1", valid=True, quote=b"q", signature=b"s"
    )
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(DASHBOARD_GROUP, channel)
    try:
        with (
            django_capture_on_commit_callbacks(execute=True),
            CaptureQueriesContext(connection) as queries,
        ):
            parsed = telemetry.parse(fleet.node, _rows(gpus, (1_000, 1_001)))
            telemetry.keep(attestation, parsed)
        event = async_to_sync(layer.receive)(channel)
    finally:
        async_to_sync(layer.group_discard)(DASHBOARD_GROUP, channel)
    assert len([q for q in queries.captured_queries if 'FROM "fleet_gpu"' in q["sql"]]) == 1
    stored = TelemetrySample.objects.filter(gpu__in=gpus).values_list("gpu__uuid", "t_ms")
    assert sorted(stored) == sorted((g.uuid, t) for g in gpus for t in (1_000, 1_001))
    batches = TelemetryBatch.objects.filter(attestation=attestation).values_list("gpu", "rows")
    assert sorted(batches) == sorted((g.pk, 2) for g in gpus)
    drawn = event["payload"]["samples"]
    assert sorted((s[0], s[1], s[5]) for s in drawn) == sorted(
        (g.uuid, t, g.generation.catalogue_id) for g in gpus for t in (1_000, 1_001)
    )


def test_readings_of_another_nodes_gpu_are_refused(fleet):
    other = Node.objects.create(name="node-2", site=fleet.site, pcr_policy=fleet.node.pcr_policy)
    theirs = GPU.objects.create(
        uuid="GPU-of-node-2", node=other, index=0, generation=fleet.gpus[0].generation
    )
    with pytest.raises(telemetry.TelemetryRefused, match="are not GPUs of node-1"):
        telemetry.parse(fleet.node, _rows([fleet.gpus[0], theirs], (1_000,)))
    assert set(telemetry.parse(fleet.node, _rows([fleet.gpus[0]], (1_000,))).gpus) == {
        fleet.gpus[0].uuid
    }
