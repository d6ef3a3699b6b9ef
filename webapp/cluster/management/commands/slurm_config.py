"""`manage.py slurm_config`: the slurm.conf NodeName lines, the gres.conf lines and the
submission gate (job_submit.lua) for the registered nodes, generated from their registered
GPU inventory, for an operator to include (docs/operations.md, "Connecting a Slurm
cluster"). Nothing is typed by hand: a node's GPUs change by re-registering it."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from scheduler.grants import slurm_conf
from webapp.cluster.slots import fragments
from webapp.fleet.models import Node


class Command(BaseCommand):
    help = "Print (or write) the Slurm config fragments for the registered nodes' GPUs."

    def add_arguments(self, parser):
        parser.add_argument("--node", action="append", help="only these nodes (repeatable)")
        parser.add_argument("--out", type=Path, help="write slurm-nodes.conf, gres.conf and "
                            "job_submit.lua into this folder instead of printing")  # fmt: skip
        parser.add_argument("--slurm-uid", type=int, default=0, help="SlurmUser's uid")

    def handle(self, *args, node=None, out=None, slurm_uid=0, **options):
        nodes = Node.objects.order_by("name")
        if node:
            nodes = nodes.filter(name__in=node)
            missing = sorted(set(node) - set(nodes.values_list("name", flat=True)))
            if missing:
                raise CommandError(f"no registered node named {', '.join(missing)}")
        try:
            node_lines, gres = fragments(nodes)
        except ValueError as exc:
            raise CommandError(f"{exc}: rename the node or fix its inventory") from None
        files = {
            "slurm-nodes.conf": "\n".join(node_lines) + "\n",
            "gres.conf": "\n".join(gres) + "\n",
            "job_submit.lua": slurm_conf.job_submit_lua(slurm_uid),
        }
        if out is None:
            for name, text in files.items():
                self.stdout.write(f"# --- {name}\n{text}")
            return
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (out / name).write_text(text)
            self.stdout.write(f"wrote {out / name}")
