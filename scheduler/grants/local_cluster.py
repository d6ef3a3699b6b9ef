"""A small but real Slurm cluster, started privately in a temporary directory for the demo and
the tests: its own munged, MariaDB server, slurmdbd, slurmctld and one slurmd per node, all
stopped (and the directory removed) on exit.

Nothing of the machine's own Slurm or MariaDB setup is read or touched: every daemon gets its
configuration, sockets, ports and state under the directory, so several clusters can run side
by side. One limit remains: Slurm's cgroup v1 hierarchy is `/sys/fs/cgroup/<ctrl>/slurm_<node>`
for every cluster on the machine, so clusters that run at the same time need distinct node
names.

GPUs without a GPU: each GPU is a character device with NVIDIA's major number made under the
directory (no driver answers it), so a job opening a device it was granted gets ENXIO and one
the cgroup forbids gets EPERM. A GPU host can pass its real `/dev/nvidiaN` instead.

Separate hosts: `spawn_prefix(role)` gives the argv prefix that runs a daemon on a host (for
example `nsenter --net=/run/netns/<ns> --`); roles are `CONTROLLER` (MariaDB, slurmdbd,
slurmctld) and each node's name (its slurmd). munged stays on the machine: its unix socket is
reachable from every network namespace. Use `nsenter --net`, not `ip netns exec`: the latter
remounts /sys, which hides the cgroup hierarchy slurmd needs.

Needs root (munge key, device nodes, cgroups, other users' jobs). Stdlib only, no Django."""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import random
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from scheduler.grants import slurm_conf
from scheduler.grants.interface import GpuSlot
from scheduler.grants.local_mariadb import LocalMariaDB, tail

log = logging.getLogger("scheduler.grants.local_cluster")

CONTROLLER = "controller"
NODE_CPUS = 8  # SlurmdParameters=config_overrides: Slurm believes the conf, not the machine
NODE_MEMORY_MB = 1000
NVIDIA_MAJOR = 195  # the character-device major of /dev/nvidiaN
MUNGE_KEY_BYTES = 1024
START_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0  # SIGTERM, then SIGKILL
KILL_WAIT_S = 5  # slurm.conf KillWait: seconds between a job's SIGTERM and SIGKILL
CANCEL_WAIT_S = 15.0  # scancel'd jobs leave the queue within KillWait plus a completion
CLIENT_TIMEOUT_S = 10.0  # one readiness probe (sinfo, sacctmgr)
POLL_S = 0.25
PORT_RANGE = (20000, 32768)  # daemons' ports: under Linux's default ephemeral 32768-60999
READY_NODE_STATES = {"idle", "mixed", "allocated", "completing"}
TMP_PREFIX = "wl-slurm-"  # a cluster directory of its own under /tmp
MARKER = "WATTLEASE_LOCAL_CLUSTER"  # in every process we start, so stop() finds leftovers
REQUIRED = ("munged", "mariadb-install-db", "mariadbd", "mariadb", "slurmdbd", "slurmctld",
            "slurmd", "slurmstepd", "sinfo", "squeue", "sbatch", "srun", "scancel",
            "sacctmgr", "sacct", "scontrol", "runuser")  # fmt: skip
INSTALL_HINT = (
    "run `make setup`, or `apt-get install slurmctld slurmd slurmdbd slurm-client munge "
    "mariadb-server`"
)
SBIN_PATH = "/usr/local/sbin:/usr/sbin:/sbin"  # daemons live here; a user's PATH may lack it
CGROUP_CONF = """\
CgroupPlugin=cgroup/v1
ConstrainDevices=yes
ConstrainCores=no
ConstrainRAMSpace=no
"""
SLURM_CONF = """\
ClusterName={cluster}
# this machine's own name, else slurmctld: "This host not a valid controller"
SlurmctldHost={hostname}({controller})
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge}
CredType=cred/munge
StateSaveLocation={d}/spool/ctld
SlurmdSpoolDir={d}/spool/d%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
GresTypes=gpu
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost={controller}
AccountingStoragePort={dbd_port}
# the munge socket of the clients' (sacctmgr, slurmctld) connections to slurmdbd
AccountingStoragePass={munge}
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/cgroup
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
KillWait={kill_wait_s}
{node_lines}
PartitionName={partition} Nodes={nodes} Default=YES MaxTime=INFINITE State=UP
"""
SLURMDBD_CONF = """\
AuthType=auth/munge
AuthInfo=socket={munge}
DbdAddr=127.0.0.1
DbdHost=localhost
DbdPort={dbd_port}
SlurmUser=root
LogFile={d}/log/slurmdbd.log
PidFile={d}/run/slurmdbd.pid
{storage}"""


@dataclass(frozen=True)
class LocalNode:
    """A node of the cluster: its GPUs as the fleet registered them (the slots the grant
    interface addresses), and for a GPU host the real device file of each index
    (`{0: "/dev/nvidia0"}`); an index without one gets a device made under the directory."""

    name: str
    address: str
    gpus: tuple[GpuSlot, ...] = ()
    devices: Mapping[int, str] = field(default_factory=dict)


class LocalClusterError(RuntimeError):
    """The cluster could not start or stop; the message carries the daemons' log tails."""


class SlurmNotInstalled(LocalClusterError):
    """A Slurm, munge or MariaDB program is missing. Callers fail loudly on it, never skip."""


def find_binaries() -> dict[str, Path]:
    """Every program the cluster runs, by name; SlurmNotInstalled naming what is missing."""
    search = f"{os.environ.get('PATH', '')}:{SBIN_PATH}"
    found = {name: shutil.which(name, path=search) for name in REQUIRED}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise SlurmNotInstalled(
            f"cannot start a local Slurm cluster: {', '.join(missing)} "
            f"not found on PATH or in {SBIN_PATH}; {INSTALL_HINT}"
        )
    return {name: Path(path) for name, path in found.items() if path is not None}


def ensure_unix_user(name: str) -> None:
    """Make a login-less unix user for test jobs if missing; the caller removes it after."""
    with contextlib.suppress(KeyError):
        pwd.getpwnam(name)
        return
    _must(["useradd", "-M", "-s", "/bin/bash", name], f"add unix user {name}")


def remove_unix_user(name: str) -> None:
    with contextlib.suppress(KeyError):
        pwd.getpwnam(name)
        _must(["userdel", name], f"remove unix user {name}")


def _must(argv: Sequence[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LocalClusterError(f"could not {what}: {' '.join(argv)}: {done.stderr.strip()}")


def _free_ports(count: int) -> list[int]:
    """Distinct TCP ports free on this machine now, below the kernel's ephemeral range (so no
    outgoing connection takes one before its daemon binds it), all held while choosing."""
    with contextlib.ExitStack() as stack:
        chosen: list[int] = []
        while len(chosen) < count:
            port = random.randrange(*PORT_RANGE)
            with contextlib.suppress(OSError):
                stack.enter_context(socket.create_server(("", port)))
                chosen.append(port)
        return chosen


@dataclass
class _Daemon:
    name: str
    process: subprocess.Popen[bytes]


class LocalCluster:
    """`with LocalCluster(nodes) as cluster:` a running cluster; `cluster.run(["sinfo"])`."""

    def __init__(
        self,
        nodes: Sequence[LocalNode],
        *,
        partition: str = "gpu",
        cluster_name: str = "local",
        controller_address: str = "127.0.0.1",
        spawn_prefix: Callable[[str], list[str]] | None = None,
        workdir: Path | None = None,
        extra_conf: str = "",
        extra_files: Mapping[str, str] | None = None,
    ) -> None:
        """`workdir`: an empty directory to use and keep (default: a new one under /tmp,
        removed on stop). `extra_conf` is appended to slurm.conf; `extra_files` (name: text)
        are written beside it (a job_submit.lua)."""
        if os.geteuid() != 0:
            raise LocalClusterError(
                "a local Slurm cluster needs root (munge key, devices, cgroups): run as root"
            )
        if not nodes:
            raise LocalClusterError("a local Slurm cluster needs at least one node")
        strays = [f"{g.uuid} on {g.node}" for n in nodes for g in n.gpus if g.node != n.name]
        if strays:
            raise LocalClusterError(f"GPUs listed under another node: {', '.join(strays)}")
        self.binaries = find_binaries()
        self.nodes = tuple(nodes)
        self.partition, self.cluster_name = partition, cluster_name
        self.controller_address = controller_address
        self._spawn_prefix = spawn_prefix
        self._own_root = workdir is None
        self.root = Path(tempfile.mkdtemp(prefix=TMP_PREFIX)) if workdir is None else workdir
        self.root.chmod(0o755)  # job users run their scripts from here
        self.extra_conf, self.extra_files = extra_conf, dict(extra_files or {})
        ports = _free_ports(3 + len(self.nodes))
        self.ctld_port, self.dbd_port, db_port = ports[:3]
        self.node_ports = {
            node.name: port for node, port in zip(self.nodes, ports[3:], strict=True)
        }
        self.munge_socket = self.root / "munge" / "sock"
        self.mariadb = LocalMariaDB(self.root, db_port, self.prefix(CONTROLLER))
        self._devices = self._device_paths()
        self._daemons: list[_Daemon] = []
        self._ctld: _Daemon | None = None
        self._last_probe = "(none yet)"  # for the error when a daemon never answers

    # --- what callers read ---
    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment for Slurm's client commands (and every daemon) of this cluster."""
        path = f"{os.environ.get('PATH', '')}:{SBIN_PATH}"
        return {**os.environ, "PATH": path, "SLURM_CONF": str(self.conf), MARKER: str(self.root)}

    @property
    def bin_dir(self) -> Path:
        """Where the Slurm client commands are (sinfo, sbatch, ...)."""
        return self.binaries["sinfo"].parent

    def node_device(self, node: str, index: int) -> Path:
        return self._devices[(node, index)]

    def _device_file(self, gpu: GpuSlot) -> str:
        return str(self.node_device(gpu.node, gpu.index))

    def run(
        self,
        argv: Sequence[str],
        user: str | None = None,
        timeout: float = 30,
        host: str | None = CONTROLLER,
    ) -> subprocess.CompletedProcess[str]:
        """A Slurm client command on `host` (a role: CONTROLLER or a node's name; None: this
        machine's own namespace), as root or as `user`, from the cluster's directory."""
        return subprocess.run(
            self.command(argv, user, host),
            env=self.env,
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def command(
        self, argv: Sequence[str], user: str | None = None, host: str | None = CONTROLLER
    ) -> list[str]:
        """The full argv that runs a Slurm client command on `host` as `user` (what `run`
        runs; for a process it cannot wait for, such as a long `srun`, start this with
        `env=self.env`)."""
        program = self.binaries.get(argv[0], argv[0])
        as_user = ["runuser", "-u", user, "--"] if user else []
        return [*self.prefix(host), *as_user, str(program), *argv[1:]]

    def prefix(self, role: str | None) -> list[str]:
        """The argv prefix that runs a command on `role`'s host (CONTROLLER or a node's name;
        None: this machine), for processes `run` cannot wait for (a long `srun`)."""
        return [] if role is None or self._spawn_prefix is None else self._spawn_prefix(role)

    def logs(self) -> str:
        """Tails of every daemon's log, for error messages."""
        parts = [
            f"--- {path}\n{tail(path)}"
            for path in sorted((self.root / "log").glob("*"))
            if path.stat().st_size
        ]
        return "\n".join([*parts, self.mariadb.logs()])

    def pids(self) -> list[int]:
        """Every live process this cluster started: daemons, slurmstepd, jobs (they inherit
        the marker from the submitting command's environment)."""
        return marked_pids(self.root)

    # --- start and stop ---
    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        self._make_dirs()
        self._start_munged()
        try:
            elapsed = self.mariadb.start(self.env)
        finally:  # stopped with the others, even when it never answered
            if self.mariadb.process is not None:
                self._daemons.append(_Daemon("mariadbd", self.mariadb.process))
        log.info("mariadbd up on 127.0.0.1:%d after %.1f s", self.mariadb.port, elapsed)
        self._write_configs()
        self._start_slurmdbd()
        self.start_controller()
        for node in self.nodes:
            self._spawn(f"slurmd-{node.name}", node.name, ["slurmd", "-D", "-N", node.name])
        elapsed = self._wait("nodes", self._nodes_ready)
        log.info("%d slurmd up after %.1f s: %s", len(self.nodes), elapsed, self.node_ports)

    def stop(self) -> None:
        """Cancel every job, stop the daemons (newest first), kill what is left, clean up."""
        if self._ctld is not None and self._ctld.process.poll() is None:
            self._cancel_all_jobs()
        for daemon in reversed(self._daemons):
            self._terminate(daemon)
        self._daemons.clear()
        self._ctld = None
        self._kill_leftovers()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def start_controller(self, clear_state: bool = False) -> None:
        """Start slurmctld, recovering its saved state (jobs survive) unless `clear_state`
        (`-c`; slurmctld's `-i` only ignores errors in the state files)."""
        argv = ["slurmctld", "-D", *(["-c"] if clear_state else [])]
        self._ctld = self._spawn("slurmctld", CONTROLLER, argv)
        elapsed = self._wait("slurmctld", self._controller_answers, self._ctld)
        log.info(
            "slurmctld up on %s:%d after %.1f s", self.controller_address, self.ctld_port, elapsed
        )

    def stop_controller(self) -> None:
        if self._ctld is not None:
            self._terminate(self._ctld)
            self._daemons.remove(self._ctld)
            self._ctld = None

    def restart_controller(self) -> None:
        self.stop_controller()
        self.start_controller()

    # --- the steps ---

    def _device_paths(self) -> dict[tuple[str, int], Path]:
        return {
            (node.name, gpu.index): Path(node.devices[gpu.index])
            if gpu.index in node.devices
            else self.root / "dev" / node.name / f"gpu{gpu.index}"
            for node in self.nodes
            for gpu in node.gpus
        }

    def _make_dirs(self) -> None:
        for sub in ("etc", "log", "run", "munge", "spool/ctld"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(MUNGE_KEY_BYTES))
        key.chmod(0o600)
        minor = 0
        for node in self.nodes:
            made = [gpu for gpu in node.gpus if gpu.index not in node.devices]
            for gpu in made:  # a distinct minor per GPU: cgroup rules are by number
                self._make_device(self.node_device(node.name, gpu.index), minor)
                minor += 1

    @staticmethod
    def _make_device(path: Path, minor: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
        path.chmod(0o666)  # mknod's mode passes through the umask

    def _start_munged(self) -> None:
        d = self.root / "munge"
        argv = ["munged", "-F", "-f", f"--socket={self.munge_socket}",
                f"--key-file={d / 'munge.key'}", f"--seed-file={d / 'seed'}",
                f"--log-file={self.root / 'log' / 'munged.log'}",
                f"--pid-file={self.root / 'run' / 'munged.pid'}"]  # fmt: skip
        daemon = self._spawn("munged", None, argv)
        elapsed = self._wait("munged", self._munge_answers, daemon)
        log.info("munged up on %s after %.1f s", self.munge_socket, elapsed)

    def _start_slurmdbd(self) -> None:
        daemon = self._spawn("slurmdbd", CONTROLLER, ["slurmdbd", "-D"])
        probe = ["sacctmgr", "-n", "-P", "list", "cluster"]
        elapsed = self._wait("slurmdbd", lambda: self._probe(probe) is not None, daemon)
        log.info(
            "slurmdbd up on %s:%d after %.1f s", self.controller_address, self.dbd_port, elapsed
        )
        done = self.run(["sacctmgr", "-i", "add", "cluster", self.cluster_name])
        if done.returncode != 0:  # slurmctld is fatal when the database lacks its cluster
            raise LocalClusterError(
                f"sacctmgr add cluster {self.cluster_name}: "
                f"{done.stdout}{done.stderr}\n{self.logs()}"
            )

    def _write_configs(self) -> None:
        etc = self.root / "etc"
        self.conf.write_text(self._slurm_conf())
        (etc / "cgroup.conf").write_text(CGROUP_CONF)
        gres = [
            line
            for node in self.nodes
            for line in slurm_conf.gres_lines(node.name, node.gpus, self._device_file)
        ]
        (etc / "gres.conf").write_text("".join(f"{line}\n" for line in gres))
        dbd = etc / "slurmdbd.conf"  # slurmdbd finds it beside $SLURM_CONF; it must be 0600
        dbd.touch(mode=0o600)
        dbd.write_text(self._slurmdbd_conf())
        for name, text in self.extra_files.items():
            (etc / name).write_text(text)

    def _slurm_conf(self) -> str:
        node_lines = [  # several slurmd may share an address: each has a port of its own
            slurm_conf.node_line(
                node.name, node.gpus, address=node.address, cpus=NODE_CPUS,
                memory_mb=NODE_MEMORY_MB, port=self.node_ports[node.name],
            )
            for node in self.nodes
        ]  # fmt: skip
        return SLURM_CONF.format(
            cluster=self.cluster_name, hostname=socket.gethostname(), d=self.root,
            controller=self.controller_address, ctld_port=self.ctld_port, munge=self.munge_socket,
            dbd_port=self.dbd_port, kill_wait_s=KILL_WAIT_S, node_lines="\n".join(node_lines),
            partition=self.partition, nodes=",".join(node.name for node in self.nodes),
        ) + self.extra_conf  # fmt: skip

    def _slurmdbd_conf(self) -> str:
        return SLURMDBD_CONF.format(
            munge=self.munge_socket, dbd_port=self.dbd_port, d=self.root,
            storage=self.mariadb.slurmdbd_storage_conf(),
        )  # fmt: skip

    # --- processes ---
    def _spawn(self, name: str, role: str | None, argv: Sequence[str]) -> _Daemon:
        """Start one daemon in the foreground; stderr (fatal errors before its log file is
        open) goes to log/<name>.err, stdout (a copy of its log) is dropped."""
        with (self.root / "log" / f"{name}.err").open("wb") as err:
            process = subprocess.Popen(
                [*self.prefix(role), str(self.binaries[argv[0]]), *argv[1:]],
                env=self.env,
                cwd=self.root,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,  # its own process group: killpg stops what it forked
            )
        daemon = _Daemon(name, process)
        self._daemons.append(daemon)
        return daemon

    def _wait(self, what: str, ready: Callable[[], bool], daemon: _Daemon | None = None) -> float:
        began = time.monotonic()
        while time.monotonic() - began < START_TIMEOUT_S:
            if daemon is not None and daemon.process.poll() is not None:
                raise LocalClusterError(
                    f"{what} exited ({daemon.process.returncode}) while "
                    f"starting in {self.root}:\n{self.logs()}"
                )
            if ready():
                return time.monotonic() - began
            time.sleep(POLL_S)
        raise LocalClusterError(
            f"{what} not up after {START_TIMEOUT_S:.0f} s in {self.root}; last check: "
            f"{self._last_probe.strip()}\n{self.logs()}"
        )

    def _probe(self, argv: Sequence[str]) -> str | None:
        """A client command's output, or None when it fails or hangs (daemon not up yet)."""
        try:
            done = self.run(argv, timeout=CLIENT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._last_probe = f"{' '.join(argv)}: no answer in {CLIENT_TIMEOUT_S:.0f} s"
            return None
        self._last_probe = f"{' '.join(argv)} ({done.returncode}): {done.stdout}{done.stderr}"
        return done.stdout if done.returncode == 0 else None

    def _munge_answers(self) -> bool:
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(self.munge_socket))
            except OSError:
                return False
        return True

    def _controller_answers(self) -> bool:
        return self._probe(["sinfo", "-h", "-o", "%P"]) is not None

    def _nodes_ready(self) -> bool:
        """Every node registered and usable: idle/mixed/allocated, not down* or unknown."""
        out = self._probe(["sinfo", "-h", "-N", "-o", "%N %T"])
        states = dict(line.split(None, 1) for line in (out or "").splitlines() if line.strip())
        return all(states.get(node.name, "").strip() in READY_NODE_STATES for node in self.nodes)

    def _cancel_all_jobs(self) -> None:
        queued = (self._probe(["squeue", "-h", "-o", "%i"]) or "").split()
        if not queued:
            return
        self.run(["scancel", "--full", *queued])
        deadline = time.monotonic() + CANCEL_WAIT_S
        while (
            time.monotonic() < deadline
            and (self._probe(["squeue", "-h", "-o", "%i"]) or "").split()
        ):
            time.sleep(POLL_S)

    @staticmethod
    def _terminate(daemon: _Daemon) -> None:
        """SIGTERM to the daemon's process group, SIGKILL after STOP_GRACE_S, then reap it."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.process.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.process.wait(STOP_GRACE_S)
                return
        log.warning("%s (pid %d) survived SIGKILL", daemon.name, daemon.process.pid)

    def _kill_leftovers(self) -> None:
        kill_marked(self.root)


def marked_pids(root: Path) -> list[int]:
    """Every live process started by the cluster whose directory is `root`."""
    mark = f"{MARKER}={root}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if mark in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return found


def kill_marked(root: Path) -> None:
    """SIGKILL what a cluster in `root` left running (its daemons when its owner was killed,
    a slurmstepd, a job), found by the marker."""
    deadline = time.monotonic() + STOP_GRACE_S
    while (left := marked_pids(root)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(POLL_S)
    if left:
        log.warning("processes of %s still alive after SIGKILL: %s", root, left)
