"""The web workers' gunicorn hook (webapp/gunicorn_conf.py), run by a real gunicorn."""

from __future__ import annotations

import gc
import http.client
import subprocess
import sys

from tests.services import _wait_for_port, free_port
from webapp import gunicorn_conf


def test_a_loaded_worker_hides_its_long_lived_objects_from_the_collector():
    gc.unfreeze()
    try:
        gunicorn_conf.post_worker_init(worker=None)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_gunicorn_takes_the_config_and_serves(tmp_path):
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "python:webapp.gunicorn_conf",
         "--workers", "1", "--bind", f"127.0.0.1:{port}", "webapp.wsgi:application"],
        env={"WATTLEASE_ENV": "development", "WATTLEASE_DATA_DIR": str(tmp_path),
             "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    try:
        _wait_for_port(port, server, "gunicorn")
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("GET", "/api/v1/leases/")
        assert connection.getresponse().status == 401  # served by Django, key required
    finally:
        server.terminate()
        server.wait(timeout=30)
