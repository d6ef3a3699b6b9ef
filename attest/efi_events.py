"""The event data of a measured-boot log, decoded (TCG PC Client Platform Firmware Profile
1.05/1.06, UEFI 2.9): event type numbers, and one decoder per common type.

Decoding never refuses a log: event data that does not match its type's structure is kept
raw as `Undecodable(reason)` (firmware gets these wrong in the field, and the digests still
replay); an unknown type is kept raw with `decoded=None`. The log's own structure (headers,
sizes, digests) is checked strictly by `attest.eventlog`.

Everything here is little-endian, as UEFI is. GUIDs are printed as UEFI and tpm2-tools print
them (the first three fields little-endian).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from functools import cached_property

EV_PREBOOT_CERT = 0x0
EV_POST_CODE = 0x1
EV_UNUSED = 0x2
EV_NO_ACTION = 0x3
EV_SEPARATOR = 0x4
EV_ACTION = 0x5
EV_EVENT_TAG = 0x6
EV_S_CRTM_CONTENTS = 0x7
EV_S_CRTM_VERSION = 0x8
EV_CPU_MICROCODE = 0x9
EV_PLATFORM_CONFIG_FLAGS = 0xA
EV_TABLE_OF_DEVICES = 0xB
EV_COMPACT_HASH = 0xC
EV_IPL = 0xD
EV_IPL_PARTITION_DATA = 0xE
EV_NONHOST_CODE = 0xF
EV_NONHOST_CONFIG = 0x10
EV_NONHOST_INFO = 0x11
EV_OMIT_BOOT_DEVICE_EVENTS = 0x12
EV_EFI_EVENT_BASE = 0x80000000
EV_EFI_VARIABLE_DRIVER_CONFIG = EV_EFI_EVENT_BASE + 0x1
EV_EFI_VARIABLE_BOOT = EV_EFI_EVENT_BASE + 0x2
EV_EFI_BOOT_SERVICES_APPLICATION = EV_EFI_EVENT_BASE + 0x3
EV_EFI_BOOT_SERVICES_DRIVER = EV_EFI_EVENT_BASE + 0x4
EV_EFI_RUNTIME_SERVICES_DRIVER = EV_EFI_EVENT_BASE + 0x5
EV_EFI_GPT_EVENT = EV_EFI_EVENT_BASE + 0x6
EV_EFI_ACTION = EV_EFI_EVENT_BASE + 0x7
EV_EFI_PLATFORM_FIRMWARE_BLOB = EV_EFI_EVENT_BASE + 0x8
EV_EFI_HANDOFF_TABLES = EV_EFI_EVENT_BASE + 0x9
EV_EFI_PLATFORM_FIRMWARE_BLOB2 = EV_EFI_EVENT_BASE + 0xA
EV_EFI_HANDOFF_TABLES2 = EV_EFI_EVENT_BASE + 0xB
EV_EFI_VARIABLE_BOOT2 = EV_EFI_EVENT_BASE + 0xC
EV_EFI_VARIABLE_AUTHORITY = EV_EFI_EVENT_BASE + 0xE0

# The names tpm2_eventlog prints (tpm2-tools lib/tpm2_eventlog_yaml.c), for the same numbers.
EVENT_TYPE_NAMES: dict[int, str] = {
    value: name
    for name, value in list(globals().items())
    if name.startswith("EV_") and name != "EV_EFI_EVENT_BASE" and isinstance(value, int)
}

GUID_BYTES = 16
STARTUP_LOCALITY_SIGNATURE = b"StartupLocality\x00"
STARTUP_LOCALITIES = (0, 3, 4)  # 3: TPM2_Startup at locality 3; 4: an H-CRTM before it
SEPARATOR_DATA_BYTES = 4
UEFI_VARIABLE_HEADER = struct.Struct("<16sQQ")  # VariableName, UnicodeNameLength, DataLength
IMAGE_LOAD_HEADER = struct.Struct("<QQQQ")  # location, length, link-time address, path length
BLOB = struct.Struct("<QQ")  # BlobBase, BlobLength
TAGGED_EVENT_HEADER = struct.Struct("<II")  # taggedEventID, taggedEventDataSize
SIGNATURE_LIST_HEADER = struct.Struct("<16sIII")  # type, list size, header size, sig size
GPT_HEADER = struct.Struct("<8sIIIIQQQQ16sQIII")  # UEFI 2.9 5.3.2, 92 bytes
GPT_ENTRY = struct.Struct("<16s16sQQQ72s")  # UEFI 2.9 5.3.3, 128 bytes
U64 = struct.Struct("<Q")
# The variables whose data is a list of EFI_SIGNATURE_LISTs (UEFI 2.9, 32.4.1)
SIGNATURE_DATABASES = frozenset({"PK", "KEK", "db", "dbx", "dbt", "dbr"})


def guid_text(raw: bytes) -> str:
    """A GUID in the registry form UEFI and tpm2-tools print: 8-4-4-4-12, lower case."""
    return str(uuid.UUID(bytes_le=raw))


def ucs2_text(raw: bytes) -> str:
    """UTF-16LE text (a UEFI CHAR16 string), without trailing NULs."""
    return raw.decode("utf-16-le", errors="replace").rstrip("\x00")


@dataclass(frozen=True)
class Undecodable:
    """The data does not have its event type's structure: kept raw, with why."""

    reason: str


@dataclass(frozen=True)
class StartupLocality:
    """EV_NO_ACTION "StartupLocality": the locality of TPM2_Startup, PCR 0's initial value."""

    locality: int


@dataclass(frozen=True)
class Separator:
    """EV_SEPARATOR: 0 normally; 1 or 0xFFFFFFFF when the firmware hit an error."""

    value: int


@dataclass(frozen=True)
class Text:
    """EV_EFI_ACTION, EV_POST_CODE strings, EV_IPL (boot loader lines), EV_S_CRTM_VERSION."""

    text: str


@dataclass(frozen=True)
class FirmwareBlob:
    """UEFI_PLATFORM_FIRMWARE_BLOB(2): where the measured firmware volume was in memory."""

    base: int
    length: int
    description: bytes | None = None  # BLOB2 only


@dataclass(frozen=True)
class SignatureList:
    """One EFI_SIGNATURE_LIST: its type GUID and (owner GUID, signature data) pairs."""

    signature_type: str
    header: bytes
    signature_size: int
    signatures: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class UefiVariable:
    """UEFI_VARIABLE_DATA (EV_EFI_VARIABLE_DRIVER_CONFIG, _BOOT, _BOOT2, _AUTHORITY)."""

    guid: str
    name: str
    data: bytes

    @cached_property
    def signature_lists(self) -> tuple[SignatureList, ...] | None:
        """The EFI_SIGNATURE_LISTs of PK, KEK, db, dbx (None when the data is not one)."""
        return parse_signature_lists(self.data)


@dataclass(frozen=True)
class ImageLoad:
    """UEFI_IMAGE_LOAD_EVENT; the device path is kept as bytes (it is not measured)."""

    location: int
    length: int
    link_time_address: int
    device_path: bytes


@dataclass(frozen=True)
class EventTag:
    """TCG_PCClientTaggedEvent (EV_EVENT_TAG)."""

    tag_id: int
    data: bytes


@dataclass(frozen=True)
class GptPartition:
    type_guid: str
    unique_guid: str
    starting_lba: int
    ending_lba: int
    attributes: int
    name: str


@dataclass(frozen=True)
class GptEvent:
    """UEFI_GPT_DATA: the partition table header and the partitions the firmware measured."""

    signature: bytes
    revision: int
    header_size: int
    header_crc32: int
    my_lba: int
    alternate_lba: int
    first_usable_lba: int
    last_usable_lba: int
    disk_guid: str
    partition_entry_lba: int
    number_of_partition_entries: int
    size_of_partition_entry: int
    partition_entry_array_crc32: int
    partitions: tuple[GptPartition, ...]


@dataclass(frozen=True)
class HandoffTables:
    """UEFI_HANDOFF_TABLE_POINTERS(2): (vendor GUID, table address) pairs."""

    tables: tuple[tuple[str, int], ...]
    description: bytes | None = None  # HANDOFF_TABLES2 only


Decoded = (
    Undecodable
    | StartupLocality
    | Separator
    | Text
    | FirmwareBlob
    | UefiVariable
    | ImageLoad
    | EventTag
    | GptEvent
    | HandoffTables
    | None
)


def parse_signature_lists(data: bytes) -> tuple[SignatureList, ...] | None:
    """EFI_SIGNATURE_LISTs filling `data` exactly, or None when they do not."""
    lists, at = [], 0
    while at < len(data):
        if len(data) - at < SIGNATURE_LIST_HEADER.size:
            return None
        kind, list_size, header_size, sig_size = SIGNATURE_LIST_HEADER.unpack_from(data, at)
        body = list_size - SIGNATURE_LIST_HEADER.size - header_size
        if sig_size <= GUID_BYTES or body < 0 or body % sig_size or at + list_size > len(data):
            return None
        start = at + SIGNATURE_LIST_HEADER.size
        header = data[start : start + header_size]
        start += header_size
        sigs = tuple(
            (guid_text(data[s : s + GUID_BYTES]), data[s + GUID_BYTES : s + sig_size])
            for s in range(start, start + body, sig_size)
        )
        lists.append(SignatureList(guid_text(kind), header, sig_size, sigs))
        at += list_size
    return tuple(lists)


def _variable(data: bytes) -> Decoded:
    if len(data) < UEFI_VARIABLE_HEADER.size:
        return Undecodable(f"{len(data)} bytes is shorter than UEFI_VARIABLE_DATA")
    guid, name_chars, data_len = UEFI_VARIABLE_HEADER.unpack_from(data)
    name_end = UEFI_VARIABLE_HEADER.size + 2 * name_chars
    if name_end + data_len != len(data):
        return Undecodable(
            f"UnicodeNameLength {name_chars} and VariableDataLength {data_len} do not fill "
            f"the {len(data)} bytes of event data"
        )
    name = ucs2_text(data[UEFI_VARIABLE_HEADER.size : name_end])
    return UefiVariable(guid_text(guid), name, data[name_end:])


def _image_load(data: bytes) -> Decoded:
    if len(data) < IMAGE_LOAD_HEADER.size:
        return Undecodable(f"{len(data)} bytes is shorter than UEFI_IMAGE_LOAD_EVENT")
    location, length, link, path_len = IMAGE_LOAD_HEADER.unpack_from(data)
    if IMAGE_LOAD_HEADER.size + path_len != len(data):
        return Undecodable(f"LengthOfDevicePath {path_len} does not fill the event data")
    return ImageLoad(location, length, link, data[IMAGE_LOAD_HEADER.size :])


def _blob(data: bytes) -> Decoded:
    if len(data) != BLOB.size:
        return Undecodable(f"UEFI_PLATFORM_FIRMWARE_BLOB is 16 bytes, not {len(data)}")
    return FirmwareBlob(*BLOB.unpack(data))


def _blob2(data: bytes) -> Decoded:
    size = data[0] if data else 0
    if len(data) != 1 + size + BLOB.size:
        return Undecodable("BlobDescriptionSize does not fit UEFI_PLATFORM_FIRMWARE_BLOB2")
    base, length = BLOB.unpack_from(data, 1 + size)
    return FirmwareBlob(base, length, data[1 : 1 + size])


def _post_code(data: bytes) -> Decoded:
    # PFP 1.05 9.4.1: a blob (16 bytes) or one of the ASCII strings "POST CODE", "SMM CODE",
    # "ACPI DATA", "BIS CODE", "Embedded UEFI Driver"; tpm2_eventlog reads 16 bytes as a blob.
    return _blob(data) if len(data) == BLOB.size else _ascii(data)


def _ascii(data: bytes) -> Decoded:
    return Text(data.decode("ascii", errors="replace"))


def _separator(data: bytes) -> Decoded:
    if len(data) != SEPARATOR_DATA_BYTES:
        return Undecodable(f"separator data is {SEPARATOR_DATA_BYTES} bytes, not {len(data)}")
    return Separator(int.from_bytes(data, "little"))


def _crtm_version(data: bytes) -> Decoded:
    if len(data) % 2:
        return Undecodable("S-CRTM version is not a CHAR16 string")
    return Text(ucs2_text(data))


def _ipl(data: bytes) -> Decoded:
    # grub and shim write UTF-8 (NUL-terminated or not); sd-boot writes UTF-16LE
    return Text(data.decode("utf-8", errors="replace").rstrip("\x00"))


def _tag(data: bytes) -> Decoded:
    if len(data) < TAGGED_EVENT_HEADER.size:
        return Undecodable("shorter than TCG_PCClientTaggedEvent")
    tag, size = TAGGED_EVENT_HEADER.unpack_from(data)
    if TAGGED_EVENT_HEADER.size + size != len(data):
        return Undecodable(f"taggedEventDataSize {size} does not fill the event data")
    return EventTag(tag, data[TAGGED_EVENT_HEADER.size :])


def _gpt(data: bytes) -> Decoded:
    if len(data) < GPT_HEADER.size + U64.size:
        return Undecodable("shorter than UEFI_GPT_DATA")
    header = GPT_HEADER.unpack_from(data)
    (count,) = U64.unpack_from(data, GPT_HEADER.size)
    if len(data) != GPT_HEADER.size + U64.size + count * GPT_ENTRY.size:
        return Undecodable(f"NumberOfPartitions {count} does not fill the event data")
    parts = []
    for at in range(GPT_HEADER.size + U64.size, len(data), GPT_ENTRY.size):
        kind, unique, first, last, attrs, name = GPT_ENTRY.unpack_from(data, at)
        parts.append(
            GptPartition(guid_text(kind), guid_text(unique), first, last, attrs, ucs2_text(name))
        )
    sig, rev, size, crc, _reserved, my, alt, first_lba, last_lba, disk = header[:10]
    entry_lba, entries, entry_size, array_crc = header[10:]
    return GptEvent(
        *(sig, rev, size, crc, my, alt, first_lba, last_lba, guid_text(disk)),
        *(entry_lba, entries, entry_size, array_crc, tuple(parts)),
    )


def _uint(raw: bytes) -> int:
    return int.from_bytes(raw, "little")


def _handoff(data: bytes, described: bool, pointer_bytes: int) -> Decoded:
    at, description = 0, None
    if described:
        size = data[0] if data else 0
        description, at = data[1 : 1 + size], 1 + size
    entry = GUID_BYTES + pointer_bytes
    if len(data) < at + U64.size:
        return Undecodable("shorter than UEFI_HANDOFF_TABLE_POINTERS")
    (count,) = U64.unpack_from(data, at)
    at += U64.size
    if len(data) != at + count * entry:
        return Undecodable(f"NumberOfTables {count} does not fill the event data")
    tables = tuple(
        (guid_text(data[i : i + GUID_BYTES]), _uint(data[i + GUID_BYTES : i + entry]))
        for i in range(at, len(data), entry)
    )
    return HandoffTables(tables, description)


def _no_action(data: bytes) -> Decoded:
    if data.startswith(STARTUP_LOCALITY_SIGNATURE):
        if len(data) != len(STARTUP_LOCALITY_SIGNATURE) + 1:
            return Undecodable("StartupLocality event is not 17 bytes")
        return StartupLocality(data[-1])
    return None  # SP800-155 reference manifests and vendor events: kept raw


_DECODERS = {
    EV_POST_CODE: _post_code,
    EV_NO_ACTION: _no_action,
    EV_SEPARATOR: _separator,
    EV_ACTION: _ascii,
    EV_EVENT_TAG: _tag,
    EV_S_CRTM_CONTENTS: _blob,
    EV_S_CRTM_VERSION: _crtm_version,
    EV_IPL: _ipl,
    EV_EFI_VARIABLE_DRIVER_CONFIG: _variable,
    EV_EFI_VARIABLE_BOOT: _variable,
    EV_EFI_VARIABLE_BOOT2: _variable,
    EV_EFI_VARIABLE_AUTHORITY: _variable,
    EV_EFI_BOOT_SERVICES_APPLICATION: _image_load,
    EV_EFI_BOOT_SERVICES_DRIVER: _image_load,
    EV_EFI_RUNTIME_SERVICES_DRIVER: _image_load,
    EV_EFI_GPT_EVENT: _gpt,
    EV_EFI_ACTION: _ascii,
    EV_EFI_PLATFORM_FIRMWARE_BLOB: _blob,
    EV_EFI_PLATFORM_FIRMWARE_BLOB2: _blob2,
}


def decode(event_type: int, data: bytes, uintn_bytes: int = 8) -> Decoded:
    """The structured form of one event's data; None for a type kept raw. `uintn_bytes` is
    the firmware's pointer size (the Spec ID's uintnSize), for the handoff tables."""
    if event_type in (EV_EFI_HANDOFF_TABLES, EV_EFI_HANDOFF_TABLES2):
        return _handoff(data, event_type == EV_EFI_HANDOFF_TABLES2, uintn_bytes)
    decoder = _DECODERS.get(event_type)
    return decoder(data) if decoder is not None else None
