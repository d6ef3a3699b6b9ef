"""A registered GPU as the cluster addresses it: the one mapping from the fleet's GPUs (uuid,
node, index, generation: the node's registered inventory) to the grant interface's slots,
and the Slurm configuration fragments generated from it (`manage.py slurm_config`)."""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.grants import slurm_conf
from scheduler.grants.interface import GpuSlot
from webapp.fleet.models import GPU, Node


def slot_of(gpu: GPU) -> GpuSlot:
    return GpuSlot(
        uuid=gpu.uuid,
        node=gpu.node.name,
        index=gpu.index,
        generation=gpu.generation.catalogue_id,
    )


def slots_of(gpus: Iterable[GPU]) -> list[GpuSlot]:
    return [slot_of(g) for g in gpus]


def node_slots(node: Node) -> list[GpuSlot]:
    return slots_of(node.gpus.select_related("node", "generation").order_by("index"))


def fragments(nodes: Iterable[Node]) -> tuple[list[str], list[str]]:
    """slurm.conf NodeName lines and gres.conf lines for these nodes' registered GPUs."""
    node_lines, gres = [], []
    for node in nodes:
        gpus = node_slots(node)
        node_lines.append(slurm_conf.node_line(node.name, gpus))
        gres += slurm_conf.gres_lines(node.name, gpus)
    return node_lines, gres
