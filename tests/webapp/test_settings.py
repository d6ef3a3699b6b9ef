"""Configuration errors are one line naming the variable and the fix, exit non-zero."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from webapp import config

ROOT = Path(__file__).resolve().parents[2]


def run_check(tmp_path, **env):
    clean = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**clean, "WATTLEASE_DATA_DIR": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"DATABASE_URL": "mysql://x/y"}, "DATABASE_URL='mysql://x/y': unsupported scheme"),
        ({"REDIS_URL": "http://nope"}, "REDIS_URL='http://nope' is not a Redis URL"),
        ({"LEDGER_BACKEND": "ethereum"}, "LEDGER_BACKEND='ethereum' is not one of"),
        ({"DEBUG": "maybe"}, "DEBUG='maybe' is not a boolean"),
        ({"WATTLEASE_ENV": "production"}, "SECRET_KEY is required"),
        ({"ATTESTATION_INTERVAL_S": "0"}, "ATTESTATION_INTERVAL_S=0 must be at least 1"),
    ],
)
def test_bad_environment_is_one_clear_line(tmp_path, env, expected):
    result = run_check(tmp_path, **env)
    assert result.returncode != 0
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_development_secret_key_is_generated_once_and_private(tmp_path):
    assert run_check(tmp_path).returncode == 0
    key_file = tmp_path / "secret_key"
    first = key_file.read_text()
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    run_check(tmp_path)
    assert key_file.read_text() == first


def test_database_url_forms(tmp_path):
    sqlite = config.database_from_url("sqlite:///var/x.sqlite3", tmp_path)
    assert sqlite["NAME"] == tmp_path / "var/x.sqlite3"
    pg = config.database_from_url("postgres://u:p%40ss@db.example:5433/lease", tmp_path)
    assert (pg["USER"], pg["PASSWORD"], pg["HOST"], pg["PORT"], pg["NAME"]) == (
        "u",
        "p@ss",
        "db.example",
        "5433",
        "lease",
    )
    with pytest.raises(ImproperlyConfigured, match="names no database"):
        config.database_from_url("postgres://u@h/", tmp_path)
