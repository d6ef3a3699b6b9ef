"""The import contracts in pyproject.toml ([tool.importlinter]) bite: in a copy of the tree, one
added upward import breaks exactly the contract that forbids it, and the unchanged copy passes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("attest", "ledger", "scheduler", "chaincode_client", "webapp")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("tree")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, copy / package, ignore=_not_python)
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


def _not_python(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if not n.endswith(".py") and not (Path(folder) / n).is_dir()]


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_tree_as_it_is_keeps_every_contract(pristine: Path) -> None:
    result = lint(pristine)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
    # every declared interface is one an app really uses (selectors included)
    assert "No matches for ignored import" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("module", "upward_import", "contracts"),
    [
        ("attest/verdict.py", "import ledger.money", "Layers"),
        ("ledger/money.py", "import scheduler.pricing", "Layers"),
        ("scheduler/pricing.py", "import webapp.config", "Layers+Pure libraries"),
        ("chaincode_client/interface.py", "import webapp.config", "Layers+Pure libraries"),
        ("ledger/canonical.py", "import django.conf", "Pure libraries"),
        ("scheduler/pricing.py", "import rest_framework", "Pure libraries"),
        ("ledger/contract/billing.py", "import ledger.audit.bill", "What a peer runs"),
        ("ledger/contract/state.py", "import ledger.engine.store", "What a peer runs"),
        # the kernel imports no app (and an app importing back is a cycle)
        ("webapp/core/events.py", "import webapp.leasing.models", "Web apps in layers+No import"),
        # the fleet <-> attestation cycle that fleet/admin.py used to hide
        (
            "webapp/fleet/models.py",
            "import webapp.attestation.actions",
            "Web apps in layers+No import",
        ),
        # observability attaches by signals: the relay importing it breaks all three
        (
            "webapp/outbox/relay.py",
            "import webapp.observability.relay_watch",
            "Web apps in layers+Web apps use+No import",
        ),
        # a downward import of an app's internals, not its declared interface
        ("webapp/console/views.py", "import webapp.leasing.lifecycle", "Web apps use"),
        # console and dashboard are independent of each other
        (
            "webapp/dashboard/views.py",
            "import webapp.console.views",
            "Web apps in layers+Web apps use",
        ),
    ],
)
def test_an_upward_import_breaks_its_contract(
    pristine: Path, tmp_path: Path, module: str, upward_import: str, contracts: str
) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(pristine, tree)
    target = tree / module
    target.write_text(target.read_text() + f"\n{upward_import}  # added by the test\n")
    result = lint(tree)
    assert result.returncode != 0, result.stdout
    # "<name> BROKEN", or "<name> BROKEN (n ignored imports, ...)" for one with ignore_imports
    broken = [line for line in result.stdout.splitlines() if " BROKEN" in line]
    expected = contracts.split("+")  # webapp brings Django with it: two contracts break
    assert len(broken) == len(expected), result.stdout
    assert all(any(b.startswith(c) for b in broken) for c in expected), result.stdout
