"""An organisation's own Fabric CA: its server, and identities enrolled from it.

Each organisation runs one `fabric-ca-server` on its own host holding two CAs: the identity CA
(`ca-<org>`: MSP certificates, with the NodeOU role in each subject's OU) and the TLS CA
(`tlsca-<org>`: TLS pairs for its peer, its chaincode server and its clients). The identities
it will issue are in its registry from its first start (with the NodeOU type of each and a
one-time secret kept on its host; its bootstrap admin registers any later one with
`fabric-ca-client register`), and are enrolled with `fabric-ca-client`, which makes each
private key where the client runs: on the host of the node that will use it. Nothing here
copies a private key; only CA certificates leave the host (`orgs.publish`).

The binaries are Fabric CA's own (`find_ca_install`): `FABRIC_CA_BIN_DIR`, else the project's
cache `${WATTLEASE_CACHE:-~/.cache/wattlease}/fabric-ca/<version>/bin/` with its stamp.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml  # type: ignore[import-untyped]  # (no stubs pinned)

from chaincode_client.fabric_network import processes
from chaincode_client.fabric_network.build import BuildSpec, build_dir, cache_root, read_stamp
from chaincode_client.fabric_network.layout import Layout, NetworkError

FABRIC_CA_MODULE = "github.com/hyperledger/fabric-ca"
FABRIC_CA_VERSION = "v1.5.21"
FABRIC_CA_SPEC = BuildSpec(
    module=FABRIC_CA_MODULE,
    commit=FABRIC_CA_VERSION,
    packages=(("cmd/fabric-ca-server", "bin"), ("cmd/fabric-ca-client", "bin")),
    name="fabric-ca",
)
CA_BINARIES = ("fabric-ca-server", "fabric-ca-client")
BOOTSTRAP_ADMIN = "admin"
TLS_CA_FOLDER = "tlsca"  # the TLS CA's home, inside the server's home
CA_START_TIMEOUT_S = 60.0
CLIENT_TIMEOUT_S = 60.0
SECRETS_FILE = "enrollment-secrets.json"  # the secrets this CA registered (0600, its host)
CERT_EXPIRY = "8760h"  # a year, Fabric CA's default for what it signs
# Fabric CA makes an Idemix issuer key for each CA at first start whether or not anyone uses
# Idemix (nothing here does); on this curve (gnark's) that takes a fraction of the default
# amcl.Fp256bn's seconds.
IDEMIX_CURVE = "gurvy.Bn254"


@dataclass(frozen=True)
class CAInstall:
    bin_dir: Path

    def binary(self, name: str) -> str:
        return str(self.bin_dir / name)


def find_ca_install(env: Mapping[str, str] | None = None) -> CAInstall:
    """Fabric CA's binaries from `FABRIC_CA_BIN_DIR` (a release's bin/), else the project's
    pinned, verified cache."""
    env = os.environ if env is None else env
    given = env.get("FABRIC_CA_BIN_DIR", "").strip()
    if given:
        bin_dir, source = Path(given).resolve(), "FABRIC_CA_BIN_DIR"
    else:
        root = build_dir(FABRIC_CA_SPEC, cache_root(env))
        if read_stamp(FABRIC_CA_SPEC, cache_root(env)) is None:
            raise NetworkError(
                f"no verified Fabric CA {FABRIC_CA_VERSION} build at {root}: install it with "
                f"`go install {FABRIC_CA_MODULE}/cmd/...@{FABRIC_CA_VERSION}` (then set "
                "FABRIC_CA_BIN_DIR to the folder holding fabric-ca-server and fabric-ca-client), "
                "or set FABRIC_CA_BIN_DIR to the bin/ folder of a Fabric CA 1.5 release"
            )
        bin_dir, source = root / "bin", "the build cache"
    missing = [str(bin_dir / b) for b in CA_BINARIES if not (bin_dir / b).is_file()]
    if missing:
        raise NetworkError(f"Fabric CA install from {source} is incomplete; missing: {missing}")
    return CAInstall(bin_dir)


@dataclass(frozen=True)
class CA:
    """One organisation's CA server, as its own host runs it, or as another host reaches it
    (then `home` is None: only the URL and the CA certificate, public, are known)."""

    process: str  # the process name in the layout ("ca.org1")
    ca_name: str  # the identity CA
    tls_ca_name: str  # the TLS CA
    host: str
    port: int
    ops_port: int
    tls_root: Path  # the identity CA's certificate: it also signed the server's TLS pair
    home: Path | None = None

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def _read(self, name: str) -> dict[str, str]:
        if self.home is None:
            raise NetworkError(f"{self.process}: its secrets live on the CA's host")
        try:
            return json.loads((self.home / name).read_text())
        except (OSError, ValueError):
            return {}

    def _write(self, name: str, doc: dict[str, str]) -> None:
        assert self.home is not None
        path = self.home / name
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2, sort_keys=True))
        tmp.chmod(0o600)
        tmp.replace(path)

    def registered(self) -> dict[str, str]:
        """Every identity this CA registered on first start, with its enrollment secret."""
        return self._read(SECRETS_FILE)

    def secret_for(self, key: str) -> str:
        """The enrollment secret of `key`, made once and kept (0600) on the CA's host."""
        known = self._read(SECRETS_FILE)
        if key not in known:
            known[key] = secrets.token_hex(16)
            self._write(SECRETS_FILE, known)
        return known[key]


def server_config(ca: CA, identities: Sequence[tuple[str, str]]) -> dict[str, object]:
    """The server's configuration on first start: its registry (the bootstrap admin and every
    identity this host will enroll, each with its NodeOU type and a secret kept on this host;
    both CAs share it) and the signing profiles (the `tls` one for TLS pairs)."""
    registrar = ("hf.Registrar.Roles", "hf.Registrar.DelegateRoles", "hf.Registrar.Attributes")
    admin_attrs: dict[str, object] = {a: "*" for a in registrar}
    admin_attrs |= {a: True for a in ("hf.Revoker", "hf.GenCRL", "hf.AffiliationMgr")}
    registry = [
        {
            "name": BOOTSTRAP_ADMIN,
            "pass": ca.secret_for(BOOTSTRAP_ADMIN),
            "type": "client",
            "affiliation": "",
            "attrs": admin_attrs,
        }
    ]
    registry += [
        {"name": name, "pass": ca.secret_for(name), "type": id_type, "affiliation": ""}
        for name, id_type in identities
    ]
    tls_usage = ["signing", "key encipherment", "server auth", "client auth", "key agreement"]
    return {
        "registry": {"maxenrollments": -1, "identities": registry},
        "idemix": {"curve": IDEMIX_CURVE},
        "signing": {
            "default": {"usage": ["digital signature"], "expiry": CERT_EXPIRY},
            "profiles": {"tls": {"usage": tls_usage, "expiry": CERT_EXPIRY}},
        },
    }


def start_server(
    install: CAInstall,
    layout: Layout,
    ca: CA,
    names: tuple[str, str],
    hosts: Sequence[str],
    identities: Sequence[tuple[str, str]],
) -> bool:
    """Start the CA server; on first start it makes both CAs' keys (`names`: the identity
    CA's and the TLS CA's common names) and registers `identities` ((name, NodeOU type)).
    False if it already runs."""
    if processes.running_pid(layout, ca.process) is not None:
        return False
    assert ca.home is not None
    home = ca.home
    (home / TLS_CA_FOLDER).mkdir(parents=True, exist_ok=True)
    home.chmod(0o700)
    config = home / "fabric-ca-server-config.yaml"
    if not config.is_file():
        config.write_text(yaml.safe_dump(server_config(ca, identities), sort_keys=False))
    tls_config = home / TLS_CA_FOLDER / "fabric-ca-config.yaml"
    if not tls_config.is_file():
        doc = {"ca": {"name": ca.tls_ca_name}, "csr": {"cn": names[1], "hosts": list(hosts)}}
        tls_config.write_text(yaml.safe_dump(doc, sort_keys=False))
    argv = [
        install.binary("fabric-ca-server"),
        "start",
        "--home",
        str(home),
        "--address",
        ca.host,
        "--port",
        str(ca.port),
        "--tls.enabled",
        "--ca.name",
        ca.ca_name,
        "--csr.cn",
        names[0],
        "--csr.hosts",
        ",".join(hosts),
        "--cafiles",
        str(tls_config),
    ]
    env = {
        **os.environ,
        "FABRIC_CA_SERVER_OPERATIONS_LISTENADDRESS": f"{ca.host}:{ca.ops_port}",
    }
    pid = processes.start(layout, ca.process, argv, env, home)
    processes.wait_port(layout, ca.process, pid, ca.port, CA_START_TIMEOUT_S, ca.host)
    return True


def _client(install: CAInstall, ca: CA, home: Path, *argv: str, what: str) -> str:
    return processes.run(
        [
            install.binary("fabric-ca-client"),
            *argv,
            "--home",
            str(home),
            "--tls.certfiles",
            str(ca.tls_root),
        ],
        {**os.environ, "FABRIC_CA_CLIENT_HOME": str(home)},
        what,
        CLIENT_TIMEOUT_S,
    )


@dataclass(frozen=True)
class Enrolled:
    cert: Path
    key: Path


def enroll(
    install: CAInstall,
    ca: CA,
    ca_name: str,
    name: str,
    secret: str,
    out: Path,
    tls_hosts: Sequence[str] = (),
) -> Enrolled:
    """Enroll `name` with CA `ca_name`: the key pair is made here (this host), the CA signs
    the certificate. With `tls_hosts`, a TLS pair (the `tls` profile) for those names."""
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".enroll-", dir=out.parent))
    try:
        argv = ["enroll", "-u", f"https://{name}:{secret}@{ca.host}:{ca.port}"]
        argv += ["--caname", ca_name, "--mspdir", str(work / "msp")]
        if tls_hosts:
            argv += ["--enrollment.profile", "tls", "--csr.hosts", ",".join(tls_hosts)]
        _client(install, ca, work, *argv, what=f"enroll {name} with {ca_name}")
        certs = list((work / "msp" / "signcerts").glob("*.pem"))
        keys = list((work / "msp" / "keystore").glob("*_sk"))
        if len(certs) != 1 or len(keys) != 1:
            raise NetworkError(f"enroll {name} with {ca_name}: expected one cert and one key")
        out.mkdir(parents=True, exist_ok=True)
        cert, key = out / "cert.pem", out / "key.pem"
        shutil.copyfile(certs[0], cert)
        key.write_bytes(keys[0].read_bytes())
        key.chmod(0o600)
        return Enrolled(cert, key)
    finally:
        shutil.rmtree(work, ignore_errors=True)
