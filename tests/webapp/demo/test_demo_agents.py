"""The demo's node agents read their counters from the trace the demo loop replays: each
quote binds the readings of the node's own GPUs since its previous one."""

from __future__ import annotations

from attest import readings
from scheduler.telemetry.sample import TelemetrySample as Sample
from webapp.demo.agents import read_counters
from webapp.fleet.models import GPU, Node
from webapp.fleet.telemetry import record_samples


def test_a_demo_agent_reads_its_nodes_readings_since_its_last_quote(fleet):
    other = Node.objects.create(name="node-9", site=fleet.site, pcr_policy=fleet.node.pcr_policy)
    theirs = GPU.objects.create(
        uuid="GPU-node-9-0", node=other, index=0, generation=fleet.gpus[0].generation
    )
    record_samples(
        Sample(g.uuid, t, t * 300, 300_000, 90, 50, 60)
        for g in [*fleet.gpus[:2], theirs]
        for t in (3_000, 1_000, 2_000)
    )
    text, last = read_counters(fleet.node.name, 1_000)
    rows = readings.parse_rows(text)
    assert last == 3_000 and {r.gpu for r in rows} == {g.uuid for g in fleet.gpus[:2]}
    assert [r.t_ms for r in rows] == [2_000, 2_000, 3_000, 3_000]  # after 1,000, in time order
    assert read_counters(fleet.node.name, last) == ("", last)  # nothing new: the mark stays
