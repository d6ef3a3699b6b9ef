"""Measured-boot logs and IMA lists written as firmware and the kernel write them, and the
same measurements extended into a real TPM: test logs made, not borrowed.

`LogBuilder` writes the crypto-agile format byte by byte from the PC Client PFP's structures
(never through the parser under test); `typical_boot` adds the events an OVMF + shim + grub
boot produces; `extend_into` extends each event's digests into a swtpm through the agent.
`ImaBuilder` writes entries of the `ima`, `ima-ng`, `ima-sig` and `ima-buf` templates over
real file digests, in both list formats.
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from attest import efi_events as E
from attest import tpm_constants as C

SHA1_SHA256 = (C.ALG_SHA1, C.ALG_SHA256)
SHA1_SHA256_SHA384 = (C.ALG_SHA1, C.ALG_SHA256, C.ALG_SHA384)
EFI_GLOBAL_VARIABLE = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
EFI_IMAGE_SECURITY_DATABASE = "d719b2cb-3d3a-4596-a3bc-dad00e67656f"
EFI_CERT_SHA256 = "c1c41626-504c-4092-aca9-41f936934328"
EFI_CERT_X509 = "a5c059a1-94e4-4aa7-87b5-ab155c2bf072"
MICROSOFT_OWNER = "77fa9abd-0359-4d32-bd60-28f4e78f784b"
SHIM_LOCK = "605dab50-e046-4300-abb6-3dd810dd8b23"
ACPI_20_TABLE = "8868e871-e4f1-11d3-bc22-0080c73c8881"
LINUX_EFI_INITRD_TAG = 0x8F3B22ED  # the Linux EFI stub's EV_EVENT_TAG for the initrd


def guid(text: str) -> bytes:
    return uuid.UUID(text).bytes_le


def ucs2(text: str) -> bytes:
    return text.encode("utf-16-le")


def variable_data(guid_text: str, name: str, data: bytes) -> bytes:
    """UEFI_VARIABLE_DATA."""
    return guid(guid_text) + struct.pack("<QQ", len(name), len(data)) + ucs2(name) + data


def signature_list(
    kind: str, signatures: Sequence[tuple[str, bytes]], header: bytes = b""
) -> bytes:
    """One EFI_SIGNATURE_LIST of equally sized (owner, data) signatures."""
    size = 16 + len(signatures[0][1])
    body = b"".join(guid(owner) + data for owner, data in signatures)
    return (
        guid(kind)
        + struct.pack("<III", 28 + len(header) + len(body), len(header), size)
        + header
        + body
    )


def image_load(location: int, length: int, device_path: bytes, link: int = 0) -> bytes:
    """UEFI_IMAGE_LOAD_EVENT."""
    return struct.pack("<QQQQ", location, length, link, len(device_path)) + device_path


def blob(base: int, length: int) -> bytes:
    return struct.pack("<QQ", base, length)


def blob2(description: bytes, base: int, length: int) -> bytes:
    return bytes([len(description)]) + description + blob(base, length)


def handoff_tables2(description: bytes, tables: Sequence[tuple[str, int]]) -> bytes:
    out = bytes([len(description)]) + description + struct.pack("<Q", len(tables))
    return out + b"".join(guid(g) + struct.pack("<Q", address) for g, address in tables)


def tagged(tag: int, data: bytes) -> bytes:
    return struct.pack("<II", tag, len(data)) + data


def gpt(disk: str, partitions: Sequence[tuple[str, str, int, int, str]]) -> bytes:
    """UEFI_GPT_DATA: the header, then each (type, unique, first LBA, last LBA, name)."""
    header = struct.pack(
        "<8sIIIIQQQQ16sQIII",
        b"EFI PART",
        0x10000,
        92,
        0x1234ABCD,
        0,
        1,
        0x3FFFFF,
        34,
        0x3FFFDE,
        guid(disk),
        2,
        128,
        128,
        0xCAFEF00D,
    )
    out = header + struct.pack("<Q", len(partitions))
    for kind, unique, first, last, name in partitions:
        raw_name = ucs2(name).ljust(72, b"\x00")
        out += struct.pack("<16s16sQQQ72s", guid(kind), guid(unique), first, last, 0, raw_name)
    return out


@dataclass(frozen=True)
class BuiltEvent:
    pcr: int
    type: int
    data: bytes
    digests: tuple[tuple[int, bytes], ...]

    def encode(self) -> bytes:
        out = struct.pack("<III", self.pcr, self.type, len(self.digests))
        out += b"".join(struct.pack("<H", alg) + d for alg, d in self.digests)
        return out + struct.pack("<I", len(self.data)) + self.data

    @property
    def extended(self) -> bool:
        return self.type != E.EV_NO_ACTION


@dataclass
class LogBuilder:
    """A crypto-agile log for `banks`; `add` logs an event whose digests are the hash of
    `measured` (what the firmware measured: an image, a firmware volume) or of the data."""

    banks: tuple[int, ...] = SHA1_SHA256
    vendor_info: bytes = b""
    uintn_size: int = 2
    events: list[BuiltEvent] = field(default_factory=list)

    def spec_id_event(self) -> bytes:
        body = b"Spec ID Event03\x00" + struct.pack(
            "<IBBBBI", 0, 0, 2, 0, self.uintn_size, len(self.banks)
        )
        body += b"".join(struct.pack("<HH", alg, C.DIGEST_SIZES[alg]) for alg in self.banks)
        body += bytes([len(self.vendor_info)]) + self.vendor_info
        return struct.pack("<II20sI", 0, E.EV_NO_ACTION, bytes(20), len(body)) + body

    def add(self, pcr: int, kind: int, data: bytes, measured: bytes | None = None) -> BuiltEvent:
        subject = data if measured is None else measured
        digests = tuple(
            (
                alg,
                bytes(C.DIGEST_SIZES[alg])
                if kind == E.EV_NO_ACTION
                else C.hash_bytes(alg, subject),
            )
            for alg in self.banks
        )
        event = BuiltEvent(pcr, kind, data, digests)
        self.events.append(event)
        return event

    def to_bytes(self, events: Iterable[BuiltEvent] | None = None) -> bytes:
        chosen = self.events if events is None else events
        return self.spec_id_event() + b"".join(e.encode() for e in chosen)


def typical_boot(
    log: LogBuilder,
    *,
    locality: int | None = None,
    secure_boot: bool = True,
    boot_loader: bytes = b"grubx64.efi version 2.06",
    cmdline: str = "linux /vmlinuz-6.1.0-13-amd64 root=/dev/sda1 ro quiet",
    dbx_hashes: Sequence[bytes] = (hashlib.sha256(b"revoked grub 2.04").digest(),),
) -> LogBuilder:
    """The events of an OVMF + shim + grub + Linux boot, in firmware order."""
    if locality is not None:
        log.add(0, E.EV_NO_ACTION, E.STARTUP_LOCALITY_SIGNATURE + bytes([locality]))
    log.add(0, E.EV_S_CRTM_VERSION, ucs2("1.00\x00"))
    log.add(0, E.EV_EFI_PLATFORM_FIRMWARE_BLOB, blob(0x820000, 0xE0000), b"PEIFV volume")
    log.add(0, E.EV_EFI_PLATFORM_FIRMWARE_BLOB2, blob2(b"DXEFV", 0x900000, 0xD00000), b"DXE")
    log.add(0, E.EV_POST_CODE, b"ACPI DATA", b"acpi tables")
    sb_var = variable_data(EFI_GLOBAL_VARIABLE, "SecureBoot", b"\x01" if secure_boot else b"\x00")
    log.add(7, E.EV_EFI_VARIABLE_DRIVER_CONFIG, sb_var)
    owner_cert = b"0\x82\x01\x0a" + bytes(range(64))  # a stand-in DER certificate
    for name, store in (
        ("PK", EFI_GLOBAL_VARIABLE),
        ("KEK", EFI_GLOBAL_VARIABLE),
        ("db", EFI_IMAGE_SECURITY_DATABASE),
    ):
        lists = signature_list(EFI_CERT_X509, [(MICROSOFT_OWNER, owner_cert + name.encode())])
        log.add(7, E.EV_EFI_VARIABLE_DRIVER_CONFIG, variable_data(store, name, lists))
    dbx = (
        signature_list(EFI_CERT_SHA256, [(MICROSOFT_OWNER, h) for h in dbx_hashes])
        if dbx_hashes
        else b""
    )
    log.add(
        7, E.EV_EFI_VARIABLE_DRIVER_CONFIG, variable_data(EFI_IMAGE_SECURITY_DATABASE, "dbx", dbx)
    )
    log.add(
        1,
        E.EV_EFI_HANDOFF_TABLES2,
        handoff_tables2(b"ACPI", [(ACPI_20_TABLE, 0x7FB7E014)]),
        b"RSDP",
    )
    boot0001 = struct.pack("<IH", 1, 4) + ucs2("debian\x00") + b"\x7f\xff\x04\x00"
    log.add(1, E.EV_EFI_VARIABLE_BOOT, variable_data(EFI_GLOBAL_VARIABLE, "BootOrder", b"\x01\x00"))
    log.add(
        1,
        E.EV_EFI_VARIABLE_BOOT,
        variable_data(EFI_GLOBAL_VARIABLE, "Boot0001", boot0001),
        boot0001,
    )
    log.add(4, E.EV_EFI_ACTION, b"Calling EFI Application from Boot Option")
    for pcr in range(8):
        log.add(pcr, E.EV_SEPARATOR, bytes(4))
    log.add(
        5,
        E.EV_EFI_GPT_EVENT,
        gpt(
            "f3c5ce8c-7b9a-4c6e-9e1f-1f2a3b4c5d6e",
            [
                (
                    "c12a7328-f81f-11d2-ba4b-00a0c93ec93b",
                    "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0",
                    2048,
                    1050623,
                    "EFI System",
                ),
                (
                    "0fc63daf-8483-4772-8e79-3d69d8477de4",
                    "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901",
                    1050624,
                    41940991,
                    "root",
                ),
            ],
        ),
    )
    device_path = b"\x02\x01\x0c\x00\xd0\x41\x03\x0a\x00\x00\x00\x00\x7f\xff\x04\x00"
    log.add(
        4,
        E.EV_EFI_BOOT_SERVICES_APPLICATION,
        image_load(0x7E3E5018, 0xF9B48, device_path),
        b"shimx64.efi",
    )
    db_entry = guid(MICROSOFT_OWNER) + owner_cert + b"db"
    log.add(
        7, E.EV_EFI_VARIABLE_AUTHORITY, variable_data(EFI_IMAGE_SECURITY_DATABASE, "db", db_entry)
    )
    log.add(14, E.EV_IPL, b"MokList\x00", b"mok list contents")
    log.add(
        4,
        E.EV_EFI_BOOT_SERVICES_APPLICATION,
        image_load(0x7D8E0018, 0x1E8000, device_path),
        boot_loader,
    )
    log.add(8, E.EV_IPL, f"grub_cmd: {cmdline}\x00".encode(), cmdline.encode())
    log.add(9, E.EV_IPL, b"/vmlinuz-6.1.0-13-amd64\x00", b"the kernel image")
    log.add(9, E.EV_EVENT_TAG, tagged(LINUX_EFI_INITRD_TAG, b"Linux initrd\x00"), b"initrd")
    log.add(5, E.EV_EFI_ACTION, b"Exit Boot Services Invocation")
    log.add(5, E.EV_EFI_ACTION, b"Exit Boot Services Returned with Success")
    return log


def extend_into(agent, events: Iterable[BuiltEvent]) -> None:
    """Extend each logged event's digests into the agent's TPM, as the firmware would have."""
    for event in events:
        if event.extended:
            agent.extend_digests(event.pcr, dict(event.digests))


# -- IMA --------------------------------------------------------------------------------
@dataclass(frozen=True)
class BuiltImaEntry:
    template: str
    digest_alg: str
    digest: bytes
    name: bytes
    extra: bytes = b""
    pcr: int = 10
    violation: bool = False

    def template_data(self) -> bytes:
        """The template data written from the kernel's field layout, not the parser's."""
        if self.template == "ima":
            return self.digest + self.name.ljust(256, b"\x00")
        fields = [self.digest_alg.encode() + b":\x00" + self.digest, self.name + b"\x00"]
        if self.template in ("ima-sig", "ima-buf"):
            fields.append(self.extra)
        return b"".join(struct.pack("<I", len(f)) + f for f in fields)

    def template_hash(self) -> bytes:
        return bytes(20) if self.violation else hashlib.sha1(self.template_data()).digest()

    def ascii(self) -> bytes:
        head = b"%2d %s %s " % (
            self.pcr,
            self.template_hash().hex().encode(),
            self.template.encode(),
        )
        if self.template == "ima":
            return head + self.digest.hex().encode() + b" " + self.name + b"\n"
        line = (
            head + self.digest_alg.encode() + b":" + self.digest.hex().encode() + b" " + self.name
        )
        if self.template in ("ima-sig", "ima-buf"):
            line += b" " + self.extra.hex().encode()
        return line + b"\n"

    def binary(self) -> bytes:
        out = struct.pack("<I", self.pcr) + self.template_hash()
        out += struct.pack("<I", len(self.template)) + self.template.encode()
        if self.template == "ima":
            return out + self.digest + struct.pack("<I", len(self.name)) + self.name
        data = self.template_data()
        return out + struct.pack("<I", len(data)) + data


def file_entry(
    path: str, content: bytes, template: str = "ima-ng", alg: str = "sha256", signature: bytes = b""
) -> BuiltImaEntry:
    """An entry measuring a file with these contents (the file digest is real)."""
    if template == "ima":
        alg = "sha1"
    return BuiltImaEntry(
        template, alg, hashlib.new(alg, content).digest(), path.encode(), signature
    )


def boot_aggregate(pcrs_digest: bytes) -> BuiltImaEntry:
    """IMA's first entry: the digest of PCRs 0-9 (here any 32 bytes stand for it)."""
    return BuiltImaEntry("ima-ng", "sha256", pcrs_digest, b"boot_aggregate")


def ima_list(entries: Iterable[BuiltImaEntry], fmt: str = "ascii") -> bytes:
    return b"".join(e.ascii() if fmt == "ascii" else e.binary() for e in entries)


def ima_bank_digest(entry: BuiltImaEntry, alg: int) -> bytes:
    """What Linux >= 5.8 extends into bank `alg` of PCR 10 for this entry."""
    if entry.violation:
        return b"\xff" * C.DIGEST_SIZES[alg]
    return C.hash_bytes(alg, entry.template_data())
