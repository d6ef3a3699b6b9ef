"""A private MariaDB server for a local Slurm cluster's accounting (slurmdbd), in a directory
of its own: no /etc/mysql, no system service, no shared socket, so several clusters (and the
machine's own server, if any) never meet. Used by `local_cluster`; stdlib only."""

from __future__ import annotations

import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

MYSQL_USER = "mysql"  # mariadbd refuses to run as root; Debian's package makes this user
ACCOUNTING_DB = "slurm_acct"
ACCOUNTING_USER = "slurm"
ACCOUNTING_HOST = "127.0.0.1"  # slurmdbd runs beside the server (same host role)
BUFFER_POOL = "32M"  # the default 128M is far more than a few test jobs need
READY_TIMEOUT_S = 60.0
POLL_S = 0.2
INSTALL_TIMEOUT_S = 120.0
LOG_TAIL_LINES = 30


class MariaDBError(RuntimeError):
    """The private MariaDB server could not be made or started; the message carries its log."""


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log, or a note that it does not exist (yet)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"({path} not written)"
    return "\n".join(text.splitlines()[-lines:])


class LocalMariaDB:
    """One mariadbd with its data under `root`, listening on 127.0.0.1:`port` (inside whatever
    network namespace `prefix` puts it) and on a unix socket for the root user's setup."""

    def __init__(self, root: Path, port: int, prefix: Sequence[str] = ()) -> None:
        self.root = root
        self.port = port
        self.prefix = list(prefix)
        self.password = secrets.token_hex(16)
        self.datadir = root / "db"
        self.rundir = root / "dbrun"  # socket and pid: mariadbd (user mysql) must own it
        self.socket = self.rundir / "my.sock"
        self.log = self.rundir / "mariadb.err"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str]) -> float:
        """Initialise the data directory, start the server, make the accounting database and
        user; returns the seconds it took to answer."""
        self._install()
        began = time.monotonic()
        argv = [
            *self.prefix,
            "runuser",
            "-u",
            MYSQL_USER,
            "--",
            "mariadbd",
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--socket={self.socket}",
            f"--port={self.port}",
            f"--bind-address={ACCOUNTING_HOST}",
            f"--pid-file={self.rundir / 'my.pid'}",
            f"--log-error={self.log}",
            f"--innodb-buffer-pool-size={BUFFER_POOL}",
        ]
        out = (self.rundir / "mariadbd.out").open("wb")
        self.process = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        out.close()
        self._wait_ready()
        self._sql(
            f"CREATE USER '{ACCOUNTING_USER}'@'{ACCOUNTING_HOST}' IDENTIFIED BY '{self.password}';"
            f" CREATE DATABASE {ACCOUNTING_DB};"
            f" GRANT ALL ON {ACCOUNTING_DB}.* TO '{ACCOUNTING_USER}'@'{ACCOUNTING_HOST}';"
        )
        return time.monotonic() - began

    def _install(self) -> None:
        for folder in (self.datadir, self.rundir):
            folder.mkdir(parents=True, exist_ok=True)
            shutil.chown(folder, MYSQL_USER, MYSQL_USER)
        done = subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",  # first, or /etc/mysql's settings (its socket) apply
                f"--user={MYSQL_USER}",
                f"--datadir={self.datadir}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            raise MariaDBError(
                f"mariadb-install-db failed ({done.returncode}) for {self.datadir}:\n"
                f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
            )

    def _wait_ready(self) -> None:
        """Poll the unix socket until the server accepts a query, or fail with its log."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise MariaDBError(f"mariadbd exited ({self.process.returncode}):\n{self.logs()}")
            if self._answers():
                return
            time.sleep(POLL_S)
        raise MariaDBError(
            f"mariadbd did not answer within {READY_TIMEOUT_S:.0f} s:\n{self.logs()}"
        )

    def _answers(self) -> bool:
        if not self.socket.exists():
            return False
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(self.socket))
            except OSError:
                return False
        return self._sql("SELECT 1;", check=False).returncode == 0

    def _sql(self, statements: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["mariadb", "--no-defaults", "-S", str(self.socket), "-uroot", "-e", statements],
            capture_output=True,
            text=True,
            timeout=READY_TIMEOUT_S,
            check=False,
        )
        if check and done.returncode != 0:
            raise MariaDBError(f"mariadb: {done.stderr.strip()} (running {statements!r})")
        return done

    def slurmdbd_storage_conf(self) -> str:
        """slurmdbd.conf's lines that point it at this server's accounting database."""
        return (
            f"StorageType=accounting_storage/mysql\nStorageHost={ACCOUNTING_HOST}\n"
            f"StoragePort={self.port}\nStorageUser={ACCOUNTING_USER}\n"
            f"StoragePass={self.password}\nStorageLoc={ACCOUNTING_DB}\n"
        )

    def logs(self) -> str:
        return (
            f"--- {self.log}\n{tail(self.log)}\n"
            f"--- {self.rundir / 'mariadbd.out'}\n{tail(self.rundir / 'mariadbd.out')}"
        )
