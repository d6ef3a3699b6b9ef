"""The registrar as a service each organisation runs (docs/operations.md, "Registrars"):

    python -m attest registrar keygen --out registrar.pem        # prints the public key (b64)
    python -m attest registrar public-key --key registrar.pem
    python -m attest registrar serve --org Org1MSP --key registrar.pem \\
        --ek-roots /etc/wattlease/ek-roots --listen 127.0.0.1:0

HTTP JSON, two calls (attest.registrar holds the rules):

    POST /challenge {node_id, ek_public, ek_certificate, ek_intermediates?, ak_public}
        -> 200 {org, challenge_id, credential_blob, secret}
    POST /activate  {challenge_id, answer}
        -> 200 {org, ak_certificate, signature}
    GET  /key       -> 200 {org, public_key}

A refusal is 400 {"error": {"code", "field", "detail"}}. `serve` prints one JSON line with the
address it listens on (port 0 picks a free one), then serves until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from attest.cli import UsageError
from attest.enrol import MAX_CERT_BYTES, load_certificate
from attest.errors import EnrolmentError
from attest.files import TooLarge, read_bounded
from attest.registrar import (
    REGISTRAR_CURVE,
    Registrar,
    RegistrarError,
    parse_activate_request,
    parse_challenge_request,
    registrar_key_b64,
)

MAX_REQUEST_BYTES = 64 * 1024  # a challenge request with its certificates is under 16 KiB
MAX_KEY_FILE_BYTES = 8192
MAX_ROOT_FILES = 64
CLIENT_TIMEOUT_S = 10.0  # a round is a few milliseconds of crypto
CERT_SUFFIXES = (".pem", ".crt", ".cer", ".der")


def load_private_key(path: str) -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(read_bounded(path, MAX_KEY_FILE_BYTES), None)
    except (OSError, TooLarge, ValueError, TypeError) as exc:
        raise UsageError(f"--key {path}: not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(
        key.curve, REGISTRAR_CURVE
    ):
        raise UsageError(f"--key {path}: a registrar key is EC P-256")
    return key


def load_ek_roots(directory: str) -> tuple[list[x509.Certificate], list[x509.Certificate]]:
    """(self-signed roots, intermediates) from the certificate files of `directory`."""
    folder = Path(directory)
    if not folder.is_dir():
        raise UsageError(f"--ek-roots {directory}: not a directory")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in CERT_SUFFIXES)[
        : MAX_ROOT_FILES + 1
    ]
    if not files or len(files) > MAX_ROOT_FILES:
        raise UsageError(f"--ek-roots {directory}: must hold 1-{MAX_ROOT_FILES} certificate files")
    certs = []
    for path in files:
        try:
            certs.append(load_certificate(read_bounded(path, MAX_CERT_BYTES), str(path)))
        except (OSError, TooLarge, EnrolmentError) as exc:
            raise UsageError(f"--ek-roots: {exc}") from None
    roots = [c for c in certs if c.issuer == c.subject]
    if not roots:
        raise UsageError(f"--ek-roots {directory}: no self-signed root among {len(certs)} files")
    return roots, [c for c in certs if c.issuer != c.subject]


class _Handler(BaseHTTPRequestHandler):
    registrar: Registrar  # set on the subclass `make_server` builds

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per refusal is written by _refuse; successes need none

    def _send(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        raw = json.dumps(body, sort_keys=True).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _refuse(self, exc: RegistrarError) -> None:
        detail = str(exc).split(": ", 1)[-1]
        print(f"registrar {self.registrar.org}: refused {exc}", file=sys.stderr, flush=True)
        self._send(
            HTTPStatus.BAD_REQUEST,
            {"error": {"code": exc.code, "field": exc.field, "detail": detail}},
        )

    def _body(self) -> object:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise RegistrarError(
                "bad_request", "Content-Length", "missing or not a number"
            ) from None
        if not 0 < length <= MAX_REQUEST_BYTES:
            raise RegistrarError("bad_request", "Content-Length", f"must be 1-{MAX_REQUEST_BYTES}")
        try:
            return json.loads(self.rfile.read(length))
        except ValueError as exc:
            raise RegistrarError("bad_request", "request", f"not JSON: {exc}") from None

    def do_GET(self) -> None:
        if self.path != "/key":
            self._send(
                HTTPStatus.NOT_FOUND,
                {"error": {"code": "not_found", "field": "path", "detail": self.path}},
            )
            return
        self._send(
            HTTPStatus.OK, {"org": self.registrar.org, "public_key": self.registrar.public_key_b64}
        )

    def do_POST(self) -> None:
        try:
            if self.path == "/challenge":
                answer = self.registrar.challenge(parse_challenge_request(self._body()))
            elif self.path == "/activate":
                answer = self.registrar.activate(*parse_activate_request(self._body()))
            else:
                raise RegistrarError(
                    "not_found", "path", f"{self.path!r}: POST /challenge or /activate"
                )
        except RegistrarError as exc:
            self._refuse(exc)
            return
        self._send(HTTPStatus.OK, answer)


def make_server(registrar: Registrar, host: str, port: int) -> ThreadingHTTPServer:
    handler = type("RegistrarHandler", (_Handler,), {"registrar": registrar})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def _listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"--listen {value!r}: must be HOST:PORT (port 0: any free port)")
    return host.strip("[]"), int(port)


def cmd_serve(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    roots, intermediates = load_ek_roots(args.ek_roots)
    try:
        registrar = Registrar(args.org, load_private_key(args.key), roots, intermediates)
    except RegistrarError as exc:
        raise UsageError(str(exc)) from None
    server = make_server(registrar, *_listen(args.listen))
    host, port = str(server.server_address[0]), int(server.server_address[1])
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    print(
        json.dumps(
            {
                "org": registrar.org,
                "listening": f"http://{host}:{port}",
                "public_key": registrar.public_key_b64,
            }
        ),
        flush=True,
    )
    stop.wait()
    server.shutdown()
    server.server_close()
    return 0, {"org": registrar.org, "stopped": True}


def cmd_keygen(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    out = Path(args.out)
    if out.exists():
        raise UsageError(f"--out {out}: exists; a registrar key is never overwritten")
    key = ec.generate_private_key(REGISTRAR_CURVE())
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        fd = out.open("xb")
    except OSError as exc:
        raise UsageError(f"--out {out}: {exc.strerror}") from None
    with fd:
        out.chmod(0o600)
        fd.write(pem)
    return 0, {"key": str(out), "public_key": registrar_key_b64(key.public_key())}


def cmd_public_key(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    return 0, {"public_key": registrar_key_b64(load_private_key(args.key).public_key())}


def add_registrar_parser(sub: Any) -> None:
    r = sub.add_parser("registrar", help="an organisation's registrar (AK certificates)")
    rsub = r.add_subparsers(dest="registrar_command", required=True)
    s = rsub.add_parser("serve", help="serve /challenge and /activate over HTTP JSON")
    s.add_argument("--org", required=True, help="this organisation's MSP id, e.g. Org1MSP")
    s.add_argument("--key", required=True, help="the registrar's EC P-256 private key (PEM)")
    s.add_argument("--ek-roots", required=True, help="a folder of EK CA certificates (PEM/DER)")
    s.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (default 127.0.0.1:0)")
    s.set_defaults(func=cmd_serve)
    k = rsub.add_parser("keygen", help="make a registrar key (PEM, mode 0600)")
    k.add_argument("--out", required=True)
    k.set_defaults(func=cmd_keygen)
    p = rsub.add_parser("public-key", help="the key's base64 DER SubjectPublicKeyInfo")
    p.add_argument("--key", required=True)
    p.set_defaults(func=cmd_public_key)


class RegistrarUnavailable(RuntimeError):
    """A registrar could not be reached or answered something that is not its protocol."""


class RegistrarClient:
    """The caller's side of one registrar's HTTP JSON API (the web app relays a node's
    rounds; the registrar's checks are its own). A refusal raises RegistrarError with the
    registrar's code and field; an unreachable registrar RegistrarUnavailable."""

    def __init__(self, org: str, url: str, timeout_s: float = CLIENT_TIMEOUT_S) -> None:
        self.org = org
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _call(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                answer = json.loads(response.read(MAX_REQUEST_BYTES))
        except urllib.error.HTTPError as exc:
            try:
                error = json.loads(exc.read(MAX_REQUEST_BYTES))["error"]
                raise RegistrarError(str(error["code"]), str(error["field"]), str(error["detail"]))
            except (ValueError, KeyError, TypeError):
                raise RegistrarUnavailable(
                    f"{self.org} registrar {self.url}: HTTP {exc.code}"
                ) from None
        except (OSError, ValueError) as exc:
            raise RegistrarUnavailable(f"{self.org} registrar {self.url}: {exc}") from None
        if not isinstance(answer, dict) or answer.get("org") != self.org:
            said = answer.get("org") if isinstance(answer, dict) else answer
            raise RegistrarUnavailable(f"{self.url} answered for {said!r}, not {self.org}")
        return answer

    def public_key(self) -> str:
        return str(self._call("/key")["public_key"])

    def challenge(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("/challenge", body)

    def activate(self, challenge_id: str, answer_b64: str) -> dict[str, Any]:
        return self._call("/activate", {"challenge_id": challenge_id, "answer": answer_b64})


def serve_in_thread(
    registrar: Registrar, host: str = "127.0.0.1"
) -> tuple[str, Callable[[], None]]:
    """(URL, stop) of `registrar` served on a free port by a daemon thread: for a process
    that plays an organisation's registrar itself (the demo, tests)."""
    server = make_server(registrar, host, 0)
    thread = threading.Thread(
        target=server.serve_forever, name=f"registrar-{registrar.org}", daemon=True
    )
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join()

    return f"http://{host}:{server.server_address[1]}", stop


def run_registrars(
    orgs: Sequence[str], ek_roots: str | Path, key_dir: str | Path
) -> tuple[dict[str, str], Callable[[], None]]:
    """Serve one registrar per organisation in this process, for a process that plays every
    organisation (the demo, tests): each key is `key_dir/<org>.pem`, made on first use and
    kept, so the keys both organisations approved stay valid across restarts.
    Returns ({org: URL}, stop)."""
    roots, intermediates = load_ek_roots(str(ek_roots))
    folder = Path(key_dir)
    folder.mkdir(parents=True, exist_ok=True)
    urls: dict[str, str] = {}
    stops: list[Callable[[], None]] = []
    for org in orgs:
        path = folder / f"{org}.pem"
        if not path.exists():
            cmd_keygen(argparse.Namespace(out=str(path)))
        registrar = Registrar(org, load_private_key(str(path)), roots, intermediates)
        urls[org], stop = serve_in_thread(registrar)
        stops.append(stop)

    def stop_all() -> None:
        for stop in stops:
            stop()

    return urls, stop_all
