"""The Slurm fragments come from the registered inventory: one GRES type per GPU, each bound
to its device, and the submission gate."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError


def test_the_fragments_name_each_registered_gpu_by_its_own_slot(fleet, tmp_path):
    call_command("slurm_config", "--out", str(tmp_path), stdout=StringIO())
    node_line = (tmp_path / "slurm-nodes.conf").read_text()
    assert node_line.startswith("NodeName=node-1 ")
    assert "Gres=" + ",".join(f"gpu:a100_sxm4_80gb_{i}:1" for i in range(4)) in node_line
    gres = (tmp_path / "gres.conf").read_text().splitlines()
    assert gres[3] == "NodeName=node-1 Name=gpu Type=a100_sxm4_80gb_3 File=/dev/nvidia3"
    assert "slurm_job_submit" in (tmp_path / "job_submit.lua").read_text()


def test_an_unknown_node_is_named(fleet):
    with pytest.raises(CommandError, match="no registered node named node-9"):
        call_command("slurm_config", "--node", "node-9", stdout=StringIO())
