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
ORDERLY_MARKER = "orderly-shutdown"  # written after TPM2_Shutdown, removed at each start
TPM_RC_SUCCESS = 0
MAX_RESPONSE_BYTES = 4096
TPM_CAP_TPM_PROPERTIES = 6
TPM_PT_LOCKOUT_COUNTER = 0x20E  # followed by TPM_PT_MAX_AUTH_FAIL (0x20F)
TPM_PT_MAX_AUTH_FAIL = 0x20F
TPM_GET_CAPABILITY_HEADER = bytes.fromhex("8001000000160000017a")  # no sessions, 22 bytes
# TPM2_DictionaryAttackParameters (0x13a) and TPM2_DictionaryAttackLockReset (0x139) on
# TPM_RH_LOCKOUT with an empty password session (swtpm_setup leaves lockoutAuth empty).
TPM_CC_DA_PARAMETERS = 0x13A
TPM_CC_DA_LOCK_RESET = 0x139
TPM_RH_LOCKOUT = 0x4000000A
EMPTY_PASSWORD_SESSION = bytes.fromhex("400000090000010000")  # handle, nonce, attrs, hmac
DEFAULT_PCR_BANKS = "sha256"
TPM2_STARTUP_CLEAR = bytes.fromhex("80010000000c000001440000")  # TPM2_Startup(TPM_SU_CLEAR)
CMD_SET_LOCALITY = 5  # swtpm control channel (swtpm_ioctl -l): the locality of what follows


@dataclass(frozen=True)
class DaParameters:
    """The dictionary-attack parameters a TPM is given (docs/attestation.md, "Dictionary-
    attack parameters"). The TPM counts one failure per refused authorisation of a
    DA-protected object (an AK) and one per start after a power loss; at `max_tries` it
    refuses every DA-protected authorisation; one failure is forgiven per `recovery_time_s`
    of powered time; a failed lockoutAuth locks that hierarchy for `lockout_recovery_s`."""

    max_tries: int
    recovery_time_s: int
    lockout_recovery_s: int

    def command(self) -> bytes:
        body = b"".join(
            n.to_bytes(4, "big")
            for n in (self.max_tries, self.recovery_time_s, self.lockout_recovery_s)
        )
        return _lockout_command(TPM_CC_DA_PARAMETERS, body)


# The demo's software TPMs lose power on every abrupt stop of the demo (each counts one
# failure): many tries, and quick self-healing, so no sequence of stops locks them out.
DEMO_DA_PARAMETERS = DaParameters(max_tries=32, recovery_time_s=10, lockout_recovery_s=60)


def _size(response: bytes) -> int:
    return int.from_bytes(response[2:6], "big")


def _lockout_command(code: int, body: bytes = b"") -> bytes:
    size = 2 + 4 + 4 + 4 + 4 + len(EMPTY_PASSWORD_SESSION) + len(body)
    return (
        b"\x80\x02"
        + size.to_bytes(4, "big")
        + code.to_bytes(4, "big")
        + TPM_RH_LOCKOUT.to_bytes(4, "big")
        + len(EMPTY_PASSWORD_SESSION).to_bytes(4, "big")
        + EMPTY_PASSWORD_SESSION
        + body
    )


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


def provision_tpm_state(
    state_dir: Path, ca: LocalCA, ecc_ek: bool = False, pcr_banks: str = DEFAULT_PCR_BANKS
) -> None:
    """Manufacture a TPM: EK at 0x81010001 (RSA-2048) with its certificate in NV 0x01c00002,
    signed by `ca` (swtpm 0.7 makes its ECC EK a P-384 one at 0x81010016). `pcr_banks`: the
    active PCR banks, comma-separated ("sha1,sha256" for a measured-boot log's two banks)."""
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
        f"active_pcr_banks = {pcr_banks}\n"
    )
    cmd = [setup, "--tpm2", "--tpmstate", str(state_dir), "--config", str(setup_conf)]
    cmd += ["--create-ek-cert", "--lock-nvram", "--overwrite", "--pcr-banks", pcr_banks]
    if ecc_ek:
        cmd.append("--ecc")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=SETUP_TIMEOUT_S)
    if done.returncode != 0:
        raise SwtpmError(f"swtpm_setup failed ({done.returncode}): {done.stdout}{done.stderr}")
    _mark_orderly(state_dir)  # swtpm_setup shuts the new TPM down in order


def _mark_orderly(state_dir: Path) -> None:
    (state_dir / ORDERLY_MARKER).touch()


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
    # whether the last start followed a stop without TPM2_Shutdown (SIGTERM/SIGKILL of the
    # process, a crash): the machine's own record that its TPM lost power
    lost_power: bool = field(default=False, repr=False)
    # the locality of TPM2_Startup: 3 starts PCR 0 at 0...03, as a platform whose firmware
    # starts the TPM at locality 3 does (its event log says so in a StartupLocality event)
    startup_locality: int = 0

    @property
    def tcti(self) -> str:
        """TCTI string for tpm2-pytss / tpm2-tools (TPM2TOOLS_TCTI)."""
        return f"swtpm:host={self.host},port={self.port}"

    @property
    def log_file(self) -> Path:
        return Path(self.state_dir) / "swtpm.log"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> Swtpm:
        """Start on `port` (fixed), or on a free pair; a pair taken by another process between
        the check and swtpm's bind is retried with a new pair."""
        if self.alive:
            return self
        self.process = None  # a swtpm that died is started again on its port
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
        marker = Path(self.state_dir) / ORDERLY_MARKER
        self.lost_power = not marker.exists()
        marker.unlink(missing_ok=True)
        cmd = [binary, "socket", "--tpm2", "--tpmstate", f"dir={self.state_dir}"]
        cmd += ["--server", f"type=tcp,port={self.port},bindaddr={self.host}"]
        cmd += ["--ctrl", f"type=tcp,port={self.port + 1},bindaddr={self.host}"]
        flags = "not-need-init" + ("" if self.startup_locality else ",startup-clear")
        cmd += ["--flags", flags, "--log", f"file={self.log_file}"]
        self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._wait_ready()
        if self.startup_locality:
            self._startup_at(self.startup_locality)
        return self

    def _control(self, command: int, payload: bytes = b"") -> None:
        with socket.create_connection((self.host, self.port + 1), timeout=STOP_TIMEOUT_S) as s:
            s.sendall(command.to_bytes(4, "big") + payload)
            result = s.recv(4)
        if result != bytes(4):
            raise SwtpmError(f"swtpm control command {command} answered {result.hex()}")

    def _startup_at(self, locality: int) -> None:
        """TPM2_Startup(CLEAR) sent at `locality`, then back to locality 0 for the rest."""
        self._control(CMD_SET_LOCALITY, bytes([locality]))
        try:
            self._run("TPM2_Startup", TPM2_STARTUP_CLEAR)
        finally:
            self._control(CMD_SET_LOCALITY, bytes([0]))

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

    def _orderly_shutdown(self) -> bool:
        """Send TPM2_Shutdown(CLEAR) first: without it the next start is a TPM reset with the
        clock not `safe`, as after a real power loss (attest.clock)."""
        try:
            with socket.create_connection((self.host, self.port), timeout=STOP_TIMEOUT_S) as s:
                s.sendall(TPM2_SHUTDOWN_CLEAR)
                return s.recv(TPM_RESPONSE_HEADER_BYTES)[6:10] == bytes(4)
        except OSError:
            return False  # a busy or dead TPM still gets SIGTERM below

    def send(self, command: bytes) -> bytes:
        """Send one TPM command on the server port; the whole response."""
        with socket.create_connection((self.host, self.port), timeout=STOP_TIMEOUT_S) as s:
            s.sendall(command)
            data = b""
            while len(data) < TPM_RESPONSE_HEADER_BYTES or len(data) < _size(data):
                chunk = s.recv(MAX_RESPONSE_BYTES)
                if not chunk:
                    raise SwtpmError(f"swtpm on port {self.port} closed the connection")
                data += chunk
        return data

    def _run(self, what: str, command: bytes) -> bytes:
        data = self.send(command)
        rc = int.from_bytes(data[6:10], "big")
        if rc != TPM_RC_SUCCESS:
            raise SwtpmError(f"{what} answered {rc:#x}")
        return data

    def set_da_parameters(self, params: DaParameters) -> None:
        """Give the TPM explicit dictionary-attack parameters (its failure count stays)."""
        self._run("TPM2_DictionaryAttackParameters", params.command())

    def lockout_counter(self) -> tuple[int, int]:
        """(TPM2_PT_LOCKOUT_COUNTER, TPM2_PT_MAX_AUTH_FAIL): failures counted, and the limit."""
        fields = (TPM_CAP_TPM_PROPERTIES, TPM_PT_LOCKOUT_COUNTER, 2)  # two properties from there
        command = TPM_GET_CAPABILITY_HEADER + b"".join(n.to_bytes(4, "big") for n in fields)
        data = self._run("TPM2_GetCapability", command)
        # header, moreData, capability, count, then (property, value) pairs
        at = TPM_RESPONSE_HEADER_BYTES + 1 + 4 + 4
        values = {
            int.from_bytes(data[i : i + 4], "big"): int.from_bytes(data[i + 4 : i + 8], "big")
            for i in range(at, len(data) - 7, 8)
        }
        return values[TPM_PT_LOCKOUT_COUNTER], values[TPM_PT_MAX_AUTH_FAIL]

    def reset_lockout(self) -> None:
        """TPM2_DictionaryAttackLockReset with the (empty) lockout authorisation."""
        self._run("TPM2_DictionaryAttackLockReset", _lockout_command(TPM_CC_DA_LOCK_RESET))

    def power_loss(self) -> None:
        """Cut the power: SIGKILL, no TPM2_Shutdown, so the next start sees a TPM reset with
        its clock not safe, as after a real power loss. `start()` brings it back."""
        proc, self.process = self.process, None
        if proc is None:
            return
        proc.kill()
        proc.wait()
        if proc.stderr:
            proc.stderr.close()

    def stop(self) -> None:
        """Orderly TPM shutdown, then SIGTERM (swtpm saves its state); kill only if stuck."""
        proc, self.process = self.process, None
        if proc is None:
            return
        if proc.poll() is None and self._orderly_shutdown():
            _mark_orderly(Path(self.state_dir))
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


def start_node_tpm(
    base_dir: Path, ca: LocalCA, ecc_ek: bool = False, pcr_banks: str = DEFAULT_PCR_BANKS
) -> Swtpm:
    """Manufacture (once) and start a swtpm for one simulated node under `base_dir`."""
    state = Path(base_dir)
    if not (state / "tpm2-00.permall").exists():
        provision_tpm_state(state, ca, ecc_ek=ecc_ek, pcr_banks=pcr_banks)
    return Swtpm(state).start()
