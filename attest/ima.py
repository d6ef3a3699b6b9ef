"""The Linux IMA measurement list: a strict, bounded parser of both formats securityfs serves
(/sys/kernel/security/ima/ascii_runtime_measurements and binary_runtime_measurements), the
template digests recomputed as the kernel computes them, the entries bounded.

Templates: `ima` (d|n), `ima-ng` (d-ng|n-ng), `ima-sig` (d-ng|n-ng|sig), `ima-buf`
(d-ng|n-ng|buf). The template digest is SHA-1 over the template data
(security/integrity/ima/ima_crypto.c, ima_calc_field_array_hash_tfm): for `ima`, the 20-byte
file digest then the file name NUL-padded to 256 bytes; for the others, each field as a
little-endian u32 length and its bytes (d-ng is "<algo>:\\0<digest>", n-ng the name with its
NUL). A listed template hash that is not that digest is refused (`ima.template_hash_mismatch`);
an all-zero one is a violation (a file measured while open for writing, or the reverse).

PCR 10's replay, incremental per quote, is `attest.ima_replay`.
The binary format is native-endian: little-endian hosts (or `ima_canonical_fmt`) only.
The ASCII format cannot represent a path holding a newline; prefer the binary list.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from attest import tpm_constants as C
from attest.errors import MalformedLog

IMA_PCR = 10
MAX_IMA_BYTES = 16 * 1024 * 1024  # per call: a 5,000-entry list is ~0.8 MiB
MAX_IMA_ENTRIES = 100_000  # per call
MAX_PATH_BYTES = 4096  # PATH_MAX, its NUL included
MAX_SIG_BYTES = 1024  # an RSA-4096 signature (512) and its header, with room
MAX_BUF_BYTES = 64 * 1024  # ima-buf: kexec command lines, keys, critical data
MAX_TEMPLATE_NAME_BYTES = 15  # IMA_TEMPLATE_NAME_LEN_MAX
IMA_EVENT_NAME_LEN_MAX = 255  # the `ima` template's names, NUL-padded to 256 when hashed
TEMPLATE_FIELDS = {
    "ima": ("d", "n"),
    "ima-ng": ("d-ng", "n-ng"),
    "ima-sig": ("d-ng", "n-ng", "sig"),
    "ima-buf": ("d-ng", "n-ng", "buf"),
}
EXTRA_LIMITS = {"sig": MAX_SIG_BYTES, "buf": MAX_BUF_BYTES}
# crypto/hash_info.c names and sizes of the file hashes IMA can use
FILE_HASH_SIZES = {
    "md5": 16,
    "sha1": 20,
    "rmd160": 20,
    "sha224": 28,
    "sha256": 32,
    "sha384": 48,
    "sha512": 64,
    "sm3": 32,
    "streebog256": 32,
    "streebog512": 64,
}
BINARY_HEADER = struct.Struct("<I")
_HEX = re.compile(rb"[0-9a-f]*")
ASCII, BINARY = "ascii", "binary"


@dataclass(frozen=True)
class ImaEntry:
    """One measurement. `index` is its position in the kernel's list (0 = boot_aggregate);
    `hashed` is the template data exactly as the kernel hashes it."""

    index: int
    pcr: int
    template: str
    template_hash: bytes
    digest_alg: str
    digest: bytes
    name: bytes
    extra: bytes  # ima-sig: the signature (maybe empty); ima-buf: the buffer; else b""
    hashed: bytes

    @property
    def path(self) -> str:
        return self.name.decode("utf-8", errors="surrogateescape")

    @property
    def violation(self) -> bool:
        return not any(self.template_hash)


def ima_error(code: str, where: str, offset: int, detail: str) -> MalformedLog:
    """The error every IMA parse or replay failure raises: code, field (ima.*), offset."""
    return MalformedLog(code, f"ima.{where}", offset, detail)


def template_data(template: str, alg: str, digest: bytes, name: bytes, extra: bytes = b"") -> bytes:
    """The bytes the kernel hashes into the template digest (see the module docstring)."""
    if template == "ima":
        return digest + name.ljust(IMA_EVENT_NAME_LEN_MAX + 1, b"\x00")
    fields = [alg.encode() + b":\x00" + digest, name + b"\x00"]
    if len(TEMPLATE_FIELDS[template]) == 3:
        fields.append(extra)
    return b"".join(len(f).to_bytes(4, "little") + f for f in fields)


def _entry(
    index: int, offset: int, pcr: int, template: str, thash: bytes, fields: tuple, hash_alg: int
) -> ImaEntry:
    alg, digest, name, extra = fields
    if not 0 <= pcr < C.PCR_COUNT:
        raise ima_error("ima.bad_pcr_index", f"entries[{index}].pcr", offset, f"PCR {pcr}")
    if alg not in FILE_HASH_SIZES or len(digest) != FILE_HASH_SIZES[alg]:
        raise ima_error(
            "ima.bad_digest",
            f"entries[{index}].digest",
            offset,
            f"a {len(digest)}-byte digest of algorithm {alg!r}",
        )
    limit = IMA_EVENT_NAME_LEN_MAX if template == "ima" else MAX_PATH_BYTES - 1
    if len(name) > limit or b"\x00" in name:
        raise ima_error("ima.bad_name", f"entries[{index}].name", offset, f"{len(name)} bytes")
    if len(extra) > EXTRA_LIMITS.get(TEMPLATE_FIELDS[template][-1], 0):
        raise ima_error("ima.bad_field", f"entries[{index}].extra", offset, f"{len(extra)} bytes")
    hashed = template_data(template, alg, digest, name, extra)
    if any(thash) and C.hash_bytes(hash_alg, hashed) != thash:
        raise ima_error(
            "ima.template_hash_mismatch",
            f"entries[{index}].template_hash",
            offset,
            f"{thash.hex()} is not the hash of the entry's template data ({name!r})",
        )
    return ImaEntry(index, pcr, template, thash, alg, digest, name, extra, hashed)


def parse_ima(
    data: bytes, fmt: str = ASCII, start: int = 0, template_hash_alg: int = C.ALG_SHA1
) -> tuple[ImaEntry, ...]:
    """Parse measurement list entries (all of them, or only those after entry `start - 1`
    when the caller sends the tail); `MalformedLog` on anything that is not one.
    `template_hash_alg`: the hash of the listed template digests (SHA-1, except in the
    per-bank lists newer kernels add, e.g. binary_runtime_measurements_sha256)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ima_error("ima.not_bytes", "list", 0, f"got {type(data).__name__}")
    if fmt not in (ASCII, BINARY) or template_hash_alg not in C.DIGEST_SIZES:
        raise ValueError(f"unknown IMA list format {fmt!r} or hash {template_hash_alg:#x}")
    data = bytes(data)
    if len(data) > MAX_IMA_BYTES:
        raise ima_error("ima.too_large", "list", MAX_IMA_BYTES, f"{len(data)} bytes")
    reader = _parse_ascii if fmt == ASCII else _parse_binary
    return tuple(reader(data, start, template_hash_alg))


def _count(index: int, start: int, offset: int) -> None:
    if index - start >= MAX_IMA_ENTRIES:
        raise ima_error("ima.too_many_entries", "list", offset, f"more than {MAX_IMA_ENTRIES}")


def _hex(token: bytes, where: str, offset: int, size: int | None = None) -> bytes:
    if not _HEX.fullmatch(token) or len(token) % 2 or (size is not None and len(token) != 2 * size):
        raise ima_error("ima.bad_line", where, offset, f"{token[:80]!r} is not the hex expected")
    return bytes.fromhex(token.decode())


def _parse_ascii(data: bytes, start: int, hash_alg: int) -> Iterable[ImaEntry]:
    if data and not data.endswith(b"\n"):
        raise ima_error("ima.truncated", "list", len(data), "the last line has no newline")
    offset, index = 0, start
    size = C.DIGEST_SIZES[hash_alg]
    for line in data.split(b"\n")[:-1]:
        _count(index, start, offset)
        where = f"entries[{index}]"
        parts = line.lstrip(b" ").split(b" ", 3)
        if len(parts) != 4 or not parts[0].isdigit() or len(parts[0]) > 2:
            raise ima_error("ima.bad_line", where, offset, f"{line[:80]!r}")
        template = parts[2].decode("ascii", errors="replace")
        if template not in TEMPLATE_FIELDS:
            raise ima_error("ima.unknown_template", f"{where}.template", offset, repr(template))
        thash = _hex(parts[1], f"{where}.template_hash", offset, size)
        fields = _ascii_fields(template, parts[3], where, offset)
        yield _entry(index, offset, int(parts[0]), template, thash, fields, hash_alg)
        offset += len(line) + 1
        index += 1


def _ascii_fields(template: str, rest: bytes, where: str, offset: int) -> tuple:
    digest_token, _, name = rest.partition(b" ")
    if template == "ima":
        return "sha1", _hex(digest_token, f"{where}.d", offset, 20), name, b""
    alg, colon, hexdigest = digest_token.partition(b":")
    if not colon:
        raise ima_error("ima.bad_line", f"{where}.d-ng", offset, f"{digest_token[:80]!r}")
    extra = b""
    if len(TEMPLATE_FIELDS[template]) == 3:
        name, space, extra_hex = name.rpartition(b" ")
        if not space:
            raise ima_error("ima.bad_line", f"{where}.{TEMPLATE_FIELDS[template][2]}", offset, "")
        extra = _hex(extra_hex, f"{where}.{TEMPLATE_FIELDS[template][2]}", offset)
    algo = alg.decode("ascii", errors="replace")
    return algo, _hex(hexdigest, f"{where}.d-ng", offset), name, extra


class _Binary:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, n: int, where: str, limit: int) -> bytes:
        if n > limit:
            raise ima_error("ima.bad_field", where, self.at, f"{n} bytes exceeds {limit}")
        if len(self.data) - self.at < n:
            raise ima_error("ima.truncated", where, self.at, f"needs {n} bytes")
        self.at += n
        return self.data[self.at - n : self.at]

    def u32(self, where: str) -> int:
        return int.from_bytes(self.take(4, where, 4), "little")

    def sized(self, where: str, limit: int) -> bytes:
        return self.take(self.u32(f"{where}.len"), where, limit)


def _parse_binary(data: bytes, start: int, hash_alg: int) -> Iterable[ImaEntry]:
    r, index = _Binary(data), start
    size = C.DIGEST_SIZES[hash_alg]
    while r.at < len(data):
        _count(index, start, r.at)
        offset, where = r.at, f"entries[{index}]"
        pcr = r.u32(f"{where}.pcr")
        thash = r.take(size, f"{where}.template_hash", size)
        template = r.sized(f"{where}.template_name", MAX_TEMPLATE_NAME_BYTES).decode(
            "ascii", errors="replace"
        )
        if template not in TEMPLATE_FIELDS:
            raise ima_error("ima.unknown_template", f"{where}.template", offset, repr(template))
        if template == "ima":
            digest = r.take(20, f"{where}.d", 20)
            fields: tuple = ("sha1", digest, r.sized(f"{where}.n", IMA_EVENT_NAME_LEN_MAX), b"")
        else:
            body = _Binary(r.sized(f"{where}.template_data", MAX_BUF_BYTES + 2 * MAX_PATH_BYTES))
            fields = _binary_fields(template, body, where, offset)
        yield _entry(index, offset, pcr, template, thash, fields, hash_alg)
        index += 1


def _binary_fields(template: str, body: _Binary, where: str, offset: int) -> tuple:
    d_ng = body.sized(f"{where}.d-ng", 16 + 2 + 64)
    alg, sep, digest = d_ng.partition(b":\x00")
    name = body.sized(f"{where}.n-ng", MAX_PATH_BYTES)
    if not sep or not name.endswith(b"\x00"):
        raise ima_error("ima.bad_field", f"{where}.template_data", offset, "d-ng or n-ng malformed")
    extra = b""
    if len(TEMPLATE_FIELDS[template]) == 3:
        extra = body.sized(f"{where}.{TEMPLATE_FIELDS[template][2]}", MAX_BUF_BYTES)
    if body.at != len(body.data):
        raise ima_error("ima.bad_field", f"{where}.template_data", offset, "trailing bytes")
    return alg.decode("ascii", errors="replace"), digest, name[:-1], extra
