"""The chaincode stub the embedded engine hands to the contract during simulation.

Same method names and semantics as fabric_shim's ChaincodeStub for what a contract uses:
get_state reads committed state only (not the transaction's own writes, as on a peer) and
records the version read; put_state/delete_state buffer writes; range and partial-composite
-key queries record what they saw for the phantom check; history comes from committed blocks;
set_event keeps the last event (Fabric allows one per transaction).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from fabric_chaincode_python.fabric_shim.utils import (
    COMPOSITEKEY_NS,
    MIN_UNICODE_RUNE_VALUE,
    validate_composite_key_attribute,
)
from fabric_protos.ledger.queryresult import kv_query_result_pb2 as kv_pb
from google.protobuf.timestamp_pb2 import Timestamp

from ledger.engine.tx import RwSet, Version

MAX_KEY_LEN = 1024
MAX_VALUE_BYTES = 256 * 1024
MAX_WRITES = 1024
RANGE_END = "\U0010ffff"


class Snapshot(Protocol):
    def __enter__(self) -> Any: ...

    def __exit__(self, exc_type: Any, exc: Any, tb: Any, /) -> Any: ...


class StateReader(Protocol):
    @property
    def lock(self) -> Snapshot:
        """Held for a whole simulation: every read sees one committed block."""
        ...

    def get(self, key: str) -> tuple[bytes, Version] | None: ...

    def range(self, start: str, end: str) -> list[tuple[str, bytes, Version]]: ...

    def history(self, key: str) -> list[tuple[str, bytes | None, int, int]]: ...


class _AsyncList:
    """An async iterator over already-fetched results (the peer pages; we have them all)."""

    def __init__(self, items: list[Any]) -> None:
        self._items = items
        self._index = 0

    def __aiter__(self) -> _AsyncList:
        return self

    async def __anext__(self) -> Any:
        if self._index >= len(self._items):
            raise StopAsyncIteration
        self._index += 1
        return self._items[self._index - 1]

    async def aclose(self) -> None:
        self._index = len(self._items)


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LEN:
        raise ValueError(f"key must be a non-empty string of <= {MAX_KEY_LEN} characters")


class SimulationStub:
    def __init__(
        self,
        state: StateReader,
        channel_id: str,
        tx_id: str,
        fn: str,
        params: list[str],
        creator: dict[str, Any],
        timestamp: tuple[int, int],
    ) -> None:
        self._state = state
        self.channel_id = channel_id
        self.tx_id = tx_id
        self._fn = fn
        self._params = params
        self._creator = creator
        self._timestamp = Timestamp(seconds=timestamp[0], nanos=timestamp[1])
        self.rwset = RwSet()
        self.events: list[tuple[str, bytes]] = []

    # -- transaction metadata -------------------------------------------------------------
    def get_function_and_parameters(self) -> tuple[str, list[str]]:
        return self._fn, list(self._params)

    def get_txid(self) -> str:
        return self.tx_id

    def get_channel_id(self) -> str:
        return self.channel_id

    def get_creator(self) -> dict[str, Any]:
        return dict(self._creator)

    def get_tx_timestamp(self) -> Timestamp:
        return self._timestamp

    def get_transient(self) -> dict[str, bytes]:
        return {}

    # -- state ----------------------------------------------------------------------------
    async def get_state(self, key: str) -> bytes:
        _check_key(key)
        found = self._state.get(key)
        if key not in self.rwset.reads:  # the first read's version is what MVCC checks
            self.rwset.reads[key] = found[1] if found else None
        return found[0] if found else b""

    async def put_state(self, key: str, value: bytes | str) -> None:
        _check_key(key)
        data = value.encode() if isinstance(value, str) else bytes(value)
        if not data:
            raise ValueError("put_state with an empty value; use delete_state")
        if len(data) > MAX_VALUE_BYTES:
            raise ValueError(f"value of {key!r} is {len(data)} bytes, limit {MAX_VALUE_BYTES}")
        self._add_write(key, data)

    async def delete_state(self, key: str) -> None:
        _check_key(key)
        self._add_write(key, None)

    def _add_write(self, key: str, value: bytes | None) -> None:
        if key not in self.rwset.writes and len(self.rwset.writes) >= MAX_WRITES:
            raise ValueError(f"more than {MAX_WRITES} writes in one transaction")
        self.rwset.writes[key] = value

    async def get_state_by_range(self, start_key: str, end_key: str) -> _AsyncList:
        end = end_key or RANGE_END
        rows = self._state.range(start_key, end)
        self.rwset.ranges.append((start_key, end, [(k, v) for k, _, v in rows]))
        return _AsyncList([kv_pb.KV(namespace="", key=k, value=value) for k, value, _ in rows])  # type: ignore[attr-defined]

    async def get_state_by_partial_composite_key(
        self, object_type: str, attributes: Sequence[str]
    ) -> _AsyncList:
        prefix = self.create_composite_key(object_type, attributes)
        return await self.get_state_by_range(prefix, prefix + RANGE_END)

    async def get_history_for_key(self, key: str) -> _AsyncList:
        _check_key(key)
        mods = []
        for tx_id, value, seconds, nanos in self._state.history(key):
            mods.append(
                kv_pb.KeyModification(  # type: ignore[attr-defined]
                    tx_id=tx_id,
                    value=value or b"",
                    is_delete=value is None,
                    timestamp=Timestamp(seconds=seconds, nanos=nanos),
                )
            )
        return _AsyncList(mods)

    # -- events and composite keys ----------------------------------------------------------
    def set_event(self, name: str, payload: bytes | str | None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("event name must be a non-empty string")
        data = payload.encode() if isinstance(payload, str) else bytes(payload or b"")
        self.events = [(name, data)]  # Fabric keeps one event per transaction: the last

    def create_composite_key(self, object_type: str, attributes: Sequence[str]) -> str:
        validate_composite_key_attribute(object_type)
        key = COMPOSITEKEY_NS + object_type + MIN_UNICODE_RUNE_VALUE
        for attribute in attributes:
            validate_composite_key_attribute(attribute)
            key += attribute + MIN_UNICODE_RUNE_VALUE
        return key

    def split_composite_key(self, composite_key: str) -> tuple[str | None, list[str]]:
        if not composite_key or composite_key[0] != COMPOSITEKEY_NS:
            return None, []
        parts = composite_key[1:].split(MIN_UNICODE_RUNE_VALUE)
        return parts[0], parts[1:-1]
