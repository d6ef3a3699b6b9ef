"""Run software TPMs (swtpm) for tests and the demo: one per simulated node.

`LocalCA` keeps swtpm_localca's CA entirely inside a directory we own (never
/var/lib/swtpm-localca); `provision_tpm_state` manufactures a TPM state with an RSA EK (and
optionally an ECC one) plus EK certificates issued by that CA; `Swtpm` starts
`swtpm socket` on a free consecutive port pair, waits until it answers, and stops it.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509

SWTPM_BIN = "swtpm"
SWTPM_SETUP_BIN = "swtpm_setup"
SWTPM_LOCALCA_BIN = "swtpm_localca"
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
SETUP_TIMEOUT_S = 120.0
PORT_RANGE = (20000, 60000)  # where free port pairs are searched
STARTUP_SETTLE_S = 0.2  # how long a swtpm that lost its server port takes to exit
POLL_INTERVAL_S = 0.02
PORT_ATTEMPTS = 3
# TPM2_Shutdown(TPM_SU_CLEAR): tag NO_SESSIONS, size 12, command code 0x145, type 0.
TPM2_SHUTDOWN_CLEAR = bytes.fromhex("80010000000c000001450000")
TPM_RESPONSE_HEADER_BYTES = 10


class SwtpmError(RuntimeError):
    """swtpm is missing, failed to manufacture a TPM state or did not start."""


def require(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        raise SwtpmError(f"{binary} not found on PATH: install the swtpm and swtpm-tools packages")
    return path


@dataclass
class LocalCA:
    """swtpm_localca's root and intermediate CA, all files under `directory`."""

    directory: Path

    def __post_init__(self) -> None:
        self.directory = Path(self.directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        conf = (
            f"statedir = {self.directory}\n"
            f"signingkey = {self.directory / 'signkey.pem'}\n"
            f"issuercert = {self.directory / 'issuercert.pem'}\n"
            f"certserial = {self.directory / 'certserial'}\n"
        )
        self.config_file.write_text(conf)
        self.options_file.write_text(
            "--platform-manufacturer Wattlease\n--platform-version 2.1\n--platform-model swtpm\n"
        )

    @property
    def config_file(self) -> Path:
        return self.directory / "swtpm-localca.conf"

    @property
    def options_file(self) -> Path:
        return self.directory / "swtpm-localca.options"

    @property
    def root_cert_file(self) -> Path:
        return self.directory / "swtpm-localca-rootca-cert.pem"

    @property
    def issuer_cert_file(self) -> Path:
        return self.directory / "issuercert.pem"

    def root_certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.root_cert_file.read_bytes())

    def issuer_certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.issuer_cert_file.read_bytes())


def provision_tpm_state(state_dir: Path, ca: LocalCA, ecc_ek: bool = False) -> None:
    """Manufacture a TPM: EK at 0x81010001 (RSA-2048) with its certificate in NV 0x01c00002,
    signed by `ca` (swtpm 0.7 makes its ECC EK a P-384 one at 0x81010016)."""
    require(SWTPM_BIN)
    setup = require(SWTPM_SETUP_BIN)
    require(SWTPM_LOCALCA_BIN)
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    setup_conf = state_dir / "swtpm_setup.conf"
    setup_conf.write_text(
        f"create_certs_tool = {shutil.which(SWTPM_LOCALCA_BIN)}\n"
        f"create_certs_tool_config = {ca.config_file}\n"
        f"create_certs_tool_options = {ca.options_file}\n"
        "active_pcr_banks = sha256\n"
    )
    cmd = [setup, "--tpm2", "--tpmstate", str(state_dir), "--config", str(setup_conf)]
    cmd += ["--create-ek-cert", "--lock-nvram", "--overwrite", "--pcr-banks", "sha256"]
    if ecc_ek:
        cmd.append("--ecc")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=SETUP_TIMEOUT_S)
    if done.returncode != 0:
        raise SwtpmError(f"swtpm_setup failed ({done.returncode}): {done.stdout}{done.stderr}")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_pair() -> int:
    """A port N with N and N+1 both free (swtpm's server and control ports)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        start = s.getsockname()[1]
    for port in [start, *range(PORT_RANGE[0], PORT_RANGE[1], 2)]:
        if PORT_RANGE[0] <= port < PORT_RANGE[1] and _port_free(port) and _port_free(port + 1):
            return port
    raise SwtpmError("no free consecutive port pair")


@dataclass
class Swtpm:
    """One `swtpm socket` process serving a TPM state directory over TCP."""

    state_dir: Path
    port: int = 0
    host: str = "127.0.0.1"
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def tcti(self) -> str:
        """TCTI string for tpm2-pytss / tpm2-tools (TPM2TOOLS_TCTI)."""
        return f"swtpm:host={self.host},port={self.port}"

    @property
    def log_file(self) -> Path:
        return Path(self.state_dir) / "swtpm.log"

    def start(self) -> Swtpm:
        """Start on `port` (fixed), or on a free pair; a pair taken by another process between
        the check and swtpm's bind is retried with a new pair."""
        if self.process is not None:
            return self
        if self.port:
            return self._start_on(self.port)
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                return self._start_on(free_port_pair())
            except SwtpmError:
                self.port = 0
                if attempt == PORT_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def _start_on(self, port: int) -> Swtpm:
        binary = require(SWTPM_BIN)
        self.port = port
        cmd = [binary, "socket", "--tpm2", "--tpmstate", f"dir={self.state_dir}"]
        cmd += ["--server", f"type=tcp,port={self.port},bindaddr={self.host}"]
        cmd += ["--ctrl", f"type=tcp,port={self.port + 1},bindaddr={self.host}"]
        cmd += ["--flags", "not-need-init,startup-clear", "--log", f"file={self.log_file}"]
        self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                self.process = None
                raise SwtpmError(
                    f"swtpm exited at start (port {self.port}): {err.strip()} {self._log_tail()}"
                )
            try:
                with socket.create_connection((self.host, self.port + 1), timeout=0.5):
                    pass
            except OSError:
                time.sleep(POLL_INTERVAL_S)
                continue
            # swtpm binds the control port before the server port: if another process took
            # the server port since free_port_pair() looked, swtpm exits just after this
            # answer ("Address already in use"). Look again once it has had the time to.
            time.sleep(STARTUP_SETTLE_S)
            if self.process.poll() is None:
                return
        self.stop()
        raise SwtpmError(f"swtpm did not listen on port {self.port + 1} in {START_TIMEOUT_S} s")

    def _log_tail(self, max_chars: int = 500) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-max_chars:].strip()
        except OSError:
            return ""

    def _orderly_shutdown(self) -> None:
        """Send TPM2_Shutdown(CLEAR) first: without it the next start reports the clock as
        not `safe` (as a real TPM does after a power loss) and quotes fail the clock check."""
        try:
            with socket.create_connection((self.host, self.port), timeout=STOP_TIMEOUT_S) as s:
                s.sendall(TPM2_SHUTDOWN_CLEAR)
                s.recv(TPM_RESPONSE_HEADER_BYTES)
        except OSError:
            pass  # a busy or dead TPM still gets SIGTERM below

    def stop(self) -> None:
        """Orderly TPM shutdown, then SIGTERM (swtpm saves its state); kill only if stuck."""
        proc, self.process = self.process, None
        if proc is None:
            return
        if proc.poll() is None:
            self._orderly_shutdown()
        proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()

    def __enter__(self) -> Swtpm:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_node_tpm(base_dir: Path, ca: LocalCA, ecc_ek: bool = False) -> Swtpm:
    """Manufacture (once) and start a swtpm for one simulated node under `base_dir`."""
    state = Path(base_dir)
    if not (state / "tpm2-00.permall").exists():
        provision_tpm_state(state, ca, ecc_ek=ecc_ek)
    return Swtpm(state).start()
