"""Reading a file that came from outside (evidence, a policy document, a receipt, a key):
never more than a stated size, whatever the file turns out to be."""

from __future__ import annotations

from pathlib import Path


class TooLarge(ValueError):
    """The file holds more than the caller's limit."""


def read_bounded(path: str | Path, limit: int) -> bytes:
    """The bytes of `path`, at most `limit` of them. It reads rather than trusting the size
    the file system states, so a pipe or a file that grows is bounded too. OSError as open
    and read raise it; TooLarge past the limit."""
    with open(path, "rb") as handle:
        raw = handle.read(limit + 1)
    if len(raw) > limit:
        raise TooLarge(f"{path} is larger than {limit} bytes")
    return raw
