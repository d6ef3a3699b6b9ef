"""Bearer tokens of the form `<kind>_<prefix>.<secret>`: the prefix finds the row and is
stored in clear; the secret is stored only as its SHA-256 digest (it is 192 random bits, so
a fast hash is enough) and compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

PREFIX_BYTES = 6  # 8 url-safe characters
SECRET_BYTES = 24  # 32 url-safe characters


@dataclass(frozen=True)
class NewToken:
    prefix: str
    digest: str
    token: str  # shown once, never stored


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_token(kind: str) -> NewToken:
    prefix = secrets.token_urlsafe(PREFIX_BYTES)
    secret = secrets.token_urlsafe(SECRET_BYTES)
    return NewToken(prefix=prefix, digest=digest(secret), token=f"{kind}_{prefix}.{secret}")


def parse(kind: str, token: str) -> tuple[str, str] | None:
    """(prefix, secret) of a well-formed token of `kind`, else None."""
    match = re.fullmatch(rf"{kind}_([A-Za-z0-9_-]{{8}})\.([A-Za-z0-9_-]{{32}})", token)
    return (match[1], match[2]) if match else None


def matches(stored_digest: str, secret: str) -> bool:
    return hmac.compare_digest(stored_digest, digest(secret))
