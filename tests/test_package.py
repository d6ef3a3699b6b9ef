"""`pip install .` works: the wheel holds every package and data file the project runs from,
and the `wattlease` command it installs runs outside the checkout."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOT_SHIPPED = ("tests", "bench", "build", "var", ".venv")
BUILD_TIMEOUT_S = 300


def _source_packages() -> set[str]:
    found = set()
    for init in ROOT.glob("*/**/__init__.py"):
        rel = init.parent.relative_to(ROOT)
        if rel.parts[0] in NOT_SHIPPED or rel.parts[0].startswith("."):
            continue
        if "node_modules" in rel.parts:
            continue
        found.add(".".join(rel.parts))
    return found


def _data_files() -> set[str]:
    files = {str(p.relative_to(ROOT)) for p in (ROOT / "ledger" / "data").glob("*.json")}
    files |= {str(p.relative_to(ROOT)) for p in ROOT.glob("webapp/*/prometheus/*.yml")}
    for kind in ("templates", "static"):
        for path in (ROOT / "webapp").glob(f"*/{kind}/**/*"):
            if path.is_file():
                files.add(str(path.relative_to(ROOT)))
    return files


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            *("-m", "pip", "wheel", ".", "--no-deps", "--no-index", "--no-build-isolation"),
            *("-q", "-w", str(out)),
        ],
        cwd=ROOT,
        check=True,
        timeout=BUILD_TIMEOUT_S,
    )
    (built,) = out.glob("wattlease-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv holding only the wheel; its dependencies come from the project's venv
    through a .pth file (the test runs offline, so nothing may be downloaded)."""
    target = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(target)
    site = Path(
        subprocess.check_output(
            [
                target / "bin" / "python",
                "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))",
            ],
            text=True,
        ).strip()
    )
    (site / "wattlease-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run(
        [
            sys.executable,
            *("-m", "pip", "--python", str(target / "bin" / "python"), "install", "-q"),
            *("--no-deps", "--no-index", str(wheel)),
        ],
        check=True,
        timeout=BUILD_TIMEOUT_S,
    )
    return target


def _run(installed: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the installed `wattlease` in `cwd`, with no setting from the test's environment
    but the one a production start requires (a secret key, made here): its data directory is
    the default one, its mode production."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")}
    env = {k: v for k, v in env.items() if not k.startswith(("WATTLEASE_", "LEDGER_"))}
    env["SECRET_KEY"] = secrets.token_urlsafe(50)
    return subprocess.run(
        [str(installed / "bin" / "wattlease"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )


def test_wheel_holds_every_package_of_the_source_tree(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {
        name.rsplit("/", 1)[0].replace("/", ".") for name in names if name.endswith("/__init__.py")
    }
    assert _source_packages() - shipped == set(), "add them to [tool.setuptools] packages"
    assert not [n for n in names if n.split("/")[0] in NOT_SHIPPED]


def test_wheel_holds_catalogue_templates_static_files_and_migrations(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"ledger/data/catalogue-v1.json", "ledger/data/rate-card-v1.json"} <= names
    assert _data_files() - names == set()
    migrations = {str(p.relative_to(ROOT)) for p in ROOT.glob("webapp/*/migrations/0*.py")}
    assert migrations and migrations - names == set()


def test_wheel_declares_the_wattlease_command(wheel):
    archive = zipfile.ZipFile(wheel)
    (entry_points,) = [n for n in archive.namelist() if n.endswith("entry_points.txt")]
    text = archive.read(entry_points).decode()
    assert "[console_scripts]" in text
    assert "wattlease = webapp.cli:main" in text


def test_installed_command_runs_from_the_installed_copy(installed, tmp_path):
    result = _run(installed, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for command in ("demo", "manage", "attest", "ledger", "scheduler", "policy"):
        assert command in result.stdout
    where = subprocess.check_output(
        [
            installed / "bin" / "python",
            "-c",
            "import webapp, attest; print(webapp.__file__, attest.__file__)",
        ],
        cwd=tmp_path,
        text=True,
    )
    assert str(ROOT) not in where and str(installed) in where


def test_installed_attest_verify_help(installed, tmp_path):
    result = _run(installed, "attest", "verify", "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "--ak-public" in result.stdout and "--nonce" in result.stdout


def test_installed_ledger_and_scheduler_commands(installed, tmp_path):
    ledger = _run(installed, "ledger", "verify", "--help", cwd=tmp_path)
    assert ledger.returncode == 0 and "--path" in ledger.stdout
    missing = _run(installed, "ledger", "verify-receipt", str(tmp_path / "nope.json"), cwd=tmp_path)
    assert missing.returncode != 0
    plan = _run(installed, "scheduler", "plan", "--help", cwd=tmp_path)
    assert plan.returncode == 0 and "--input" in plan.stdout
    policy = _run(installed, "policy", "approve", "--help", cwd=tmp_path)
    assert policy.returncode == 0 and "--sha256" in policy.stdout


def test_installed_manage_finds_settings_templates_and_static_files(installed, tmp_path):
    check = _run(installed, "manage", "check", "--fail-level", "WARNING", cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    found = _run(installed, "manage", "findstatic", "dashboard/dashboard.js", cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert str(installed) in found.stdout
    # an installed copy keeps its data in ./var of the working directory, not site-packages
    where = _run(
        installed,
        "manage",
        "shell",
        "-c",
        "from django.conf import settings; print(settings.DATA_DIR, settings.LEDGER_PATH)",
        cwd=tmp_path,
    )
    assert where.returncode == 0, where.stderr
    data_dir, ledger_path = where.stdout.strip().splitlines()[-1].split()
    assert Path(data_dir) == tmp_path / "var" and Path(ledger_path).parent == tmp_path / "var"
    assert not list(installed.glob("lib/*/site-packages/var"))


def test_unknown_command_is_a_usage_error(installed, tmp_path):
    result = _run(installed, "frobnicate", cwd=tmp_path)
    assert result.returncode == 2
    assert "unknown command 'frobnicate'" in result.stderr
