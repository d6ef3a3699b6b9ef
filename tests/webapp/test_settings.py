"""Configuration errors are one line naming the variable and the fix, exit non-zero."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from webapp import config

ROOT = Path(__file__).resolve().parents[2]


def run_check(tmp_path, *args, drop=(), **env):
    dropped = ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", *drop)
    clean = {k: v for k, v in os.environ.items() if k not in dropped}
    return subprocess.run(
        [sys.executable, "manage.py", "check", *args],
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
    assert run_check(tmp_path, WATTLEASE_ENV="development").returncode == 0
    key_file = tmp_path / "secret_key"
    first = key_file.read_text()
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    run_check(tmp_path, WATTLEASE_ENV="development")
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


PRODUCTION = {
    # the production settings docs/operations.md documents, behind a TLS-terminating proxy
    "WATTLEASE_ENV": "production",
    "ALLOWED_HOSTS": "lease.example.com",
    "BEHIND_TLS_PROXY": "1",
}


def test_a_plain_start_is_production_and_refuses_without_a_secret_key(tmp_path):
    result = run_check(tmp_path, drop=("WATTLEASE_ENV", "SECRET_KEY"))
    assert result.returncode != 0
    assert "SECRET_KEY is required when WATTLEASE_ENV=production" in result.stderr
    assert not (tmp_path / "secret_key").exists()


def test_check_deploy_is_clean_with_the_documented_production_settings(tmp_path):
    key = secrets.token_urlsafe(50)
    result = run_check(
        tmp_path, "--deploy", "--fail-level", "WARNING", **PRODUCTION, SECRET_KEY=key
    )
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"SECRET_KEY": "x" * 40}, "SECRET_KEY must be at least 50 characters"),
        ({"SECRET_KEY": "ab" * 30}, "with 5 different characters"),
        ({"DASHBOARD_LOGIN_REQUIRED": "0"}, "DASHBOARD_LOGIN_REQUIRED=0 is refused"),
    ],
)
def test_production_refuses_weak_settings(tmp_path, env, expected):
    result = run_check(tmp_path, **{**PRODUCTION, "SECRET_KEY": secrets.token_urlsafe(50), **env})
    assert result.returncode != 0
    assert expected in result.stderr


@pytest.mark.parametrize(("entry", "kept_s"), [("webapp.wsgi", 60), ("webapp.asgi", 0)])
def test_asgi_servers_keep_no_database_connection_between_requests(tmp_path, entry, kept_s):
    """Under ASGI each request runs on a new thread: a kept connection per thread exhausted
    PostgreSQL's connections (500s at 100 req/s with two gunicorn ASGI workers)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("WATTLEASE_ASGI", "DATABASE_URL")}
    shown = subprocess.run(
        [sys.executable, "-c", f"import {entry}; from django.conf import settings; "
         "print(settings.DATABASES['default']['CONN_MAX_AGE'])"],
        cwd=ROOT,
        env={**clean, "WATTLEASE_DATA_DIR": str(tmp_path), "WATTLEASE_ENV": "development",
             "DATABASE_URL": "postgres://u@127.0.0.1:1/wattlease"},
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert shown.stdout.split()[-1] == str(kept_s)
