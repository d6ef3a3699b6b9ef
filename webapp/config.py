"""Strict readers for configuration from the environment.

Every value is validated when settings load; a bad one stops start-up with
ImproperlyConfigured naming the variable, the value and what would be accepted.
"""

from __future__ import annotations

import os
import re
import secrets
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

# what `manage.py check --deploy` accepts as a strong key
MIN_SECRET_KEY_CHARS = 50
MIN_SECRET_KEY_DISTINCT = 5
TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use 1/0, true/false, yes/no")


def env_int(name: str, default: int, *, minimum: int = 0, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a whole number") from None
    if value < minimum or (maximum is not None and value > maximum):
        upper = "" if maximum is None else f" and at most {maximum}"
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}{upper}")
    return value


RATE_PATTERN = re.compile(r"[0-9]+/(s|sec|second|m|min|minute|h|hour|d|day)")


def env_rate(name: str, default: str) -> str:
    """A request rate as DRF's throttles read it: `<count>/<s|min|hour|day>`."""
    value = os.environ.get(name, default).strip()
    if not RATE_PATTERN.fullmatch(value):
        raise ImproperlyConfigured(f"{name}={value!r} is not a rate; use e.g. 20/s or 600/min")
    return value


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, default)
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} is not one of: {', '.join(choices)}")
    return value


def database_from_url(url: str, base_dir: Path, conn_max_age_s: int = 60) -> dict:
    """Django DATABASES['default'] from sqlite:///path or postgres://user:pw@host:port/db;
    a PostgreSQL connection is kept `conn_max_age_s` for the thread's next request."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        # sqlite:///relative/path or sqlite:////absolute/path
        raw_path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
        if not raw_path:
            raise ImproperlyConfigured(
                f"DATABASE_URL={url!r} names no file; use sqlite:///var/wattlease.sqlite3"
            )
        path = Path(raw_path)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": path if path.is_absolute() else base_dir / path,
            "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE"},
        }
    if parts.scheme in ("postgres", "postgresql"):
        name = unquote(parts.path.lstrip("/"))
        if not name:
            raise ImproperlyConfigured(
                f"DATABASE_URL={url!r} names no database; use postgres://user:pw@host:5432/db"
            )
        try:
            port = parts.port
        except ValueError:
            raise ImproperlyConfigured(f"DATABASE_URL={url!r} has an invalid port") from None
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(port or ""),
            "CONN_MAX_AGE": conn_max_age_s,
        }
    raise ImproperlyConfigured(
        f"DATABASE_URL={url!r}: unsupported scheme {parts.scheme!r}; "
        "use sqlite:///path or postgres://user:pw@host:port/db"
    )


def redis_url(name: str) -> str | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    if urlsplit(raw).scheme not in ("redis", "rediss", "unix"):
        raise ImproperlyConfigured(
            f"{name}={raw!r} is not a Redis URL; use redis://127.0.0.1:6379/0"
        )
    return raw


def secret_key(production: bool, data_dir: Path) -> str:
    """SECRET_KEY from the environment; in development, generated once into a local file."""
    key = os.environ.get("SECRET_KEY", "")
    if key:
        if len(key) < MIN_SECRET_KEY_CHARS or len(set(key)) < MIN_SECRET_KEY_DISTINCT:
            raise ImproperlyConfigured(
                f"SECRET_KEY must be at least {MIN_SECRET_KEY_CHARS} characters long with "
                f"{MIN_SECRET_KEY_DISTINCT} different characters; generate one with: "
                "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
            )
        return key
    if production:
        raise ImproperlyConfigured(
            "SECRET_KEY is required when WATTLEASE_ENV=production; "
            "generate one with: python -c 'import secrets; print(secrets.token_urlsafe(50))'"
        )
    path = data_dir / "secret_key"
    if path.exists():
        return path.read_text().strip()
    data_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return key


def default_data_dir(base_dir: Path) -> Path:
    """`var/` beside manage.py in a checkout; `./var` of the working directory when Wattlease
    is an installed package (site-packages is no place for a database)."""
    if (base_dir / "manage.py").is_file():
        return base_dir / "var"
    return Path.cwd() / "var"


def env_networks(name: str, default: str) -> tuple[IPv4Network | IPv6Network, ...]:
    """Comma-separated addresses or CIDR networks (`127.0.0.1/32,::1/128`); empty for none."""
    raw = os.environ.get(name, default)
    networks = []
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        try:
            networks.append(ip_network(part, strict=False))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {part!r} is not an IP address or network (e.g. 10.0.0.0/8)"
            ) from None
    return tuple(networks)


def registrar_urls(raw: str) -> dict[str, str]:
    """REGISTRARS: "MSP=URL,MSP=URL" -> {MSP id: URL}."""
    urls: dict[str, str] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        org, sep, url = item.partition("=")
        if not sep or not org or not url.startswith(("http://", "https://")) or org in urls:
            raise ImproperlyConfigured(
                f"REGISTRARS: {item!r} is not MSP_ID=http(s)://host:port (once per organisation)"
            )
        urls[org] = url
    return urls


def registrars_setting(urls: dict[str, str]) -> str:
    """The REGISTRARS value naming `urls` ({MSP id: URL}), as registrar_urls reads it."""
    return ",".join(f"{org}={url}" for org, url in urls.items())
