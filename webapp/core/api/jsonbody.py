"""Untrusted JSON request bodies, read within bounds. No Django here: plain bytes in, a
plain value or a `JsonRefused` naming the rule out.

Python's parser recurses once per nesting level, so a body nested 100,000 deep ends in a
RecursionError, and it accepts lone surrogates (`"\\ud800"`) that no UTF-8 response can
carry. Both are refused here, before any serializer sees the value."""

from __future__ import annotations

import json
from typing import Any

MAX_JSON_DEPTH = 32  # arrays and objects inside each other; the API's deepest body uses 3


class JsonRefused(ValueError):
    """The body is not acceptable JSON; `code` names the rule it broke."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code


def _refuse_constant(name: str) -> Any:
    raise JsonRefused("json.constant", f"{name} is not a JSON number")


def loads_bounded(raw: bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse `raw` as UTF-8 JSON no deeper than `max_depth`, with only UTF-8-encodable text."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonRefused("json.encoding", f"body is not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise JsonRefused("json.depth", f"nested deeper than {max_depth} levels") from None
    except JsonRefused:
        raise
    except ValueError as exc:
        raise JsonRefused("json.syntax", f"malformed JSON: {exc}") from None
    check_value(value, max_depth=max_depth)
    return value


def check_value(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse nesting deeper than `max_depth` and strings (keys included) that UTF-8 cannot
    encode. Walks with its own stack, so no depth can exhaust Python's."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, (list, dict)):
            if depth + 1 > max_depth:
                raise JsonRefused("json.depth", f"nested deeper than {max_depth} levels")
            if isinstance(item, dict):
                for key in item:
                    _check_text(key)
                children = item.values()
            else:
                children = item
            pending.extend((child, depth + 1) for child in children)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise JsonRefused(
            "json.surrogate", f"text holds a lone surrogate at character {exc.start}"
        ) from None
