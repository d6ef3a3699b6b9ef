"""Chaincode-as-a-service packages, as `peer lifecycle chaincode install` takes them.

A CCaaS package is a tar.gz holding metadata.json ({"type": "ccaas", "label": ...}) and
code.tar.gz, which holds connection.json: where the peer dials the chaincode server and with
what TLS. The peer's package id is `<label>:<hex sha256 of the package bytes>`, so the
package is written deterministically (fixed order, mtimes, owners) and the same inputs give
the same id on every machine.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
from dataclasses import dataclass

# Fabric's lifecycle label rule (core/chaincode/persistence: LabelRegexp).
LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
MAX_LABEL_CHARS = 128
DEFAULT_DIAL_TIMEOUT = "10s"


class PackageError(ValueError):
    pass


@dataclass(frozen=True)
class Connection:
    address: str  # host:port the peer dials
    dial_timeout: str = DEFAULT_DIAL_TIMEOUT
    root_cert: str = ""  # PEM of the CA of the chaincode server's TLS cert; empty: no TLS
    client_cert: str = ""  # PEM the peer presents when the server requires client auth
    client_key: str = ""

    def to_json(self) -> bytes:
        doc: dict[str, object] = {
            "address": self.address,
            "dial_timeout": self.dial_timeout,
            "tls_required": bool(self.root_cert),
        }
        if self.root_cert:
            doc["root_cert"] = self.root_cert
            doc["client_auth_required"] = bool(self.client_cert)
            if self.client_cert:
                doc["client_cert"], doc["client_key"] = self.client_cert, self.client_key
        return json.dumps(doc, indent=2, sort_keys=True).encode()


def _tar_gz(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(files[name]), 0o644, 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(files[name]))
    return gzip.compress(raw.getvalue(), mtime=0)


def build_package(label: str, connection: Connection) -> bytes:
    if not LABEL_RE.match(label) or len(label) > MAX_LABEL_CHARS:
        raise PackageError(
            f"chaincode label {label!r} must match {LABEL_RE.pattern} "
            f"and be at most {MAX_LABEL_CHARS} chars"
        )
    if ":" not in connection.address:
        raise PackageError(f"connection address {connection.address!r}: expected host:port")
    if bool(connection.client_cert) != bool(connection.client_key):
        raise PackageError("client_cert and client_key go together")
    code = _tar_gz({"connection.json": connection.to_json()})
    metadata = json.dumps({"label": label, "type": "ccaas"}, sort_keys=True).encode()
    return _tar_gz({"code.tar.gz": code, "metadata.json": metadata})


def package_id(label: str, package: bytes) -> str:
    return f"{label}:{hashlib.sha256(package).hexdigest()}"
