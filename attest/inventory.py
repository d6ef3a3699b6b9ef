"""The node's GPU inventory, bound into its enrolment quote.

The agent reads each GPU's NVML name, UUID and serial and quotes with
`inventory_digest(node_id, gpus)` as the qualifying data (extraData), so the AK's signature
covers what the measured node reported; every endorser recomputes the digest from the
inventory registered with the node. A fixed binary framing (fields may not hold NUL), so the
agent and the contract need no shared JSON encoder.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

INVENTORY_DOMAIN = b"wattlease/gpu-inventory/v1\x00"
INVENTORY_FIELDS = ("uuid", "name", "serial")
MAX_FIELD_CHARS = 96


def inventory_digest(node_id: str, gpus: Iterable[Mapping[str, str]]) -> bytes:
    """SHA-256 over the domain, the node id and each GPU's uuid, name and serial, in uuid
    order; raises ValueError for a field that is not a short NUL-free string."""
    parts = [INVENTORY_DOMAIN, _field(node_id, "node_id")]
    for gpu in sorted(gpus, key=lambda g: str(g.get("uuid"))):
        parts += [_field(gpu.get(name), name) for name in INVENTORY_FIELDS]
    return hashlib.sha256(b"".join(parts)).digest()


def _field(value: Any, name: str) -> bytes:
    if not isinstance(value, str) or len(value) > MAX_FIELD_CHARS or "\x00" in value:
        raise ValueError(f"{name}: must be a string of <= {MAX_FIELD_CHARS} chars without NUL")
    try:
        return value.encode() + b"\x00"
    except UnicodeEncodeError:  # a lone surrogate, which JSON text can carry
        raise ValueError(f"{name}: not valid Unicode text") from None


def read_nvml_inventory() -> list[dict[str, str]]:
    """Every GPU NVML sees on this host: {uuid, name, serial} (serial "" where the board has
    none, as GeForce cards). Raises RuntimeError when NVML cannot be loaded."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise RuntimeError(f"NVML is not available: {exc}") from None
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            try:
                serial = pynvml.nvmlDeviceGetSerial(handle)
            except pynvml.NVMLError:
                serial = ""
            gpus.append(
                {
                    "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                    "name": _text(pynvml.nvmlDeviceGetName(handle)),
                    "serial": _text(serial),
                }
            )
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
