"""Canonical JSON: the one encoding of everything the ledger signs, hashes or stores.

Every endorsing peer must write byte-identical values, so there is exactly one encoder:
keys sorted, no whitespace, UTF-8. It is orjson (a compiled encoder): JSON is on every step
of a transaction (proposal, state reads and writes, the response, the envelope, the block),
and the standard library's encoder and decoder were a third of a transaction's CPU time.

Decoding is strict RFC 8259: NaN/Infinity and integers beyond 64 bits are refused with a
ValueError (orjson.JSONDecodeError subclasses it), which every caller already handles as
malformed input. Bytes already on the ledger are never re-encoded: hashes and signatures
are checked over the stored bytes, so values written by an earlier encoder stay valid.
"""

from __future__ import annotations

from typing import Any

import orjson

_OPTIONS = orjson.OPT_SORT_KEYS


def dumps(value: Any) -> bytes:
    """Canonical bytes of a JSON value. Raises ValueError for what JSON cannot hold
    canonically (a non-string key, a lone surrogate, an integer beyond 64 bits)."""
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError as exc:
        raise ValueError(f"not encodable as canonical JSON: {exc}") from None


def loads(raw: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON; raises ValueError when it is not strict JSON."""
    return orjson.loads(raw)
