"""Django settings for Wattlease. Everything that varies between machines comes from the
environment (see the configuration table in README.md) and is validated here."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from webapp.config import (
    database_from_url,
    default_data_dir,
    env_bool,
    env_choice,
    env_int,
    env_networks,
    env_rate,
    env_str,
    redis_url,
    registrar_urls,
    secret_key,
)

BASE_DIR = Path(__file__).resolve().parent.parent

# Production-shaped unless development is asked for (`make demo` and the tests ask).
WATTLEASE_ENV = env_choice("WATTLEASE_ENV", "production", ("development", "production"))
PRODUCTION = WATTLEASE_ENV == "production"
DATA_DIR = Path(env_str("WATTLEASE_DATA_DIR", str(default_data_dir(BASE_DIR)))).resolve()

SECRET_KEY = secret_key(PRODUCTION, DATA_DIR)
DEBUG = env_bool("DEBUG", not PRODUCTION)
ALLOWED_HOSTS = [h for h in env_str("ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "axes",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "webapp.core",
    "webapp.tenancy",
    "webapp.fleet",
    "webapp.cluster",
    "webapp.attestation",
    "webapp.leasing",
    "webapp.outbox",
    "webapp.dashboard",
    "webapp.console",
    "webapp.observability",
    "webapp.demo",
]

MIDDLEWARE = [
    "webapp.observability.middleware.ObservabilityMiddleware",  # first: times everything
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",  # Accept-Language, or the page's switch
    "webapp.core.timezones.ViewerTimezoneMiddleware",  # times in the viewer's zone
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes requires
]

# Admin login lockout (django-axes): after ADMIN_LOGIN_FAILURES failed logins for one user
# name from one address, that pair is refused (429) for ADMIN_LOCKOUT_S.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("ADMIN_LOGIN_FAILURES", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(seconds=env_int("ADMIN_LOCKOUT_S", 900, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False

ROOT_URLCONF = "webapp.urls"
ASGI_APPLICATION = "webapp.asgi.application"
WSGI_APPLICATION = "webapp.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "webapp.console.context.units",
            ],
        },
    },
]

# A database connection is kept for the next request of the thread that opened it. A WSGI
# worker serves every request on its one thread, so it reuses one connection; under ASGI each
# request runs on a thread of its own (asgiref's per-request executor), so kept connections
# pile up until PostgreSQL refuses more ("too many clients": 500s at 100 req/s with two ASGI
# workers, bench/web_bench.py). webapp/asgi.py sets WATTLEASE_ASGI=1: one per request there.
ASGI_SERVER = env_bool("WATTLEASE_ASGI", False)
DB_CONN_MAX_AGE_S = 0 if ASGI_SERVER else 60
DATABASES = {
    "default": database_from_url(
        env_str("DATABASE_URL", f"sqlite:///{DATA_DIR / 'wattlease.sqlite3'}"),
        BASE_DIR,
        DB_CONN_MAX_AGE_S,
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = redis_url("REDIS_URL")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
# The API's request budgets (webapp/core/budgets.py) use this cache's Redis client when
# REDIS_URL is set, so every process shares them; otherwise each process counts in memory.
CACHES = {
    "default": (
        {"BACKEND": "webapp.core.cache.RedisCache", "LOCATION": REDIS_URL}
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}

LEDGER_BACKEND = env_choice("LEDGER_BACKEND", "embedded", ("embedded", "fabric"))
LEDGER_PATH = Path(env_str("LEDGER_PATH", str(DATA_DIR / "ledger.sqlite3")))
# The channel's trust roots the console's bill verdicts are computed with (the roots file an
# auditor is handed: `python -m chaincode_client.fabric_network roots`). Empty: on the
# embedded ledger, its organisations' CA certificates; on Fabric, the local network's when the
# demo runs one, else the console says it cannot audit.
LEDGER_TRUST_ROOTS = env_str("LEDGER_TRUST_ROOTS", "")
TELEMETRY_SOURCE = env_choice("TELEMETRY_SOURCE", "replay", ("replay", "nvml"))
# How often the server challenges each node for a fresh quote, and how long a good quote
# keeps a node leasable when its PCR policy sets no age of its own.
ATTESTATION_INTERVAL_S = env_int("ATTESTATION_INTERVAL_S", 60, minimum=1)
ATTESTATION_MAX_AGE_S = env_int("ATTESTATION_MAX_AGE_S", 300, minimum=1)
# The lease worker: seconds between its passes, and wall seconds in one leased hour (3600;
# a test or the demo shortens it; the tenant console's progress bars read it too).
LEASE_WORKER_INTERVAL_S = env_int("LEASE_WORKER_INTERVAL_S", 5, minimum=1)
# How long the lease worker waits, after a lease ends, for a quote to attest every GPU's
# readings past the end before settling it anyway on what was attested (readings come with
# each quote, so by default: two attestation intervals).
TELEMETRY_SETTLE_WAIT_S = env_int("TELEMETRY_SETTLE_WAIT_S", 2 * ATTESTATION_INTERVAL_S, minimum=0)
LEASE_HOUR_S = env_int("LEASE_HOUR_S", 3600, minimum=1)
# The cluster whose access control a lease is (webapp/cluster, docs/operations.md,
# "Connecting a Slurm cluster"): "slurm" grants each lease as a Slurm allocation of exactly
# its GPUs and drains nodes whose attestation fails; "none" records leases without granting
# them anywhere (a ledger-only deployment, and most tests).
CLUSTER_BACKEND = env_choice("CLUSTER_BACKEND", "none", ("none", "slurm"))
SLURM_CONF = env_str("SLURM_CONF", "")  # the cluster's slurm.conf ("": Slurm's default)
SLURM_PARTITION = env_str("SLURM_PARTITION", "gpu")
SLURM_BIN_DIR = env_str("SLURM_BIN_DIR", "")  # where sbatch & co. are ("": PATH)
# Telemetry retention (docs/operations.md, "Telemetry retention"): whole UTC days of readings
# kept (the readings bill lines cite are kept as long as the lines), days of hourly rollups
# kept for the dashboards, partitions created ahead, and how often `telemetry_retention` runs.
TELEMETRY_RETENTION_DAYS = env_int("TELEMETRY_RETENTION_DAYS", 14, minimum=1)
TELEMETRY_ROLLUP_RETENTION_DAYS = env_int("TELEMETRY_ROLLUP_RETENTION_DAYS", 400, minimum=1)
# days a committed challenge or quote keeps its outbox row (webapp/outbox/actions.prune_done)
OUTBOX_PROTOCOL_RETENTION_DAYS = env_int("OUTBOX_PROTOCOL_RETENTION_DAYS", 7, minimum=1)
# attestations nothing relies on, expired nonces and each quote's audit rows (webapp/
# attestation/actions/retention.py)
ATTESTATION_RETENTION_DAYS = env_int("ATTESTATION_RETENTION_DAYS", 14, minimum=1)
TELEMETRY_PARTITIONS_AHEAD_DAYS = env_int("TELEMETRY_PARTITIONS_AHEAD_DAYS", 2, minimum=0)
TELEMETRY_RETENTION_INTERVAL_S = env_int("TELEMETRY_RETENTION_INTERVAL_S", 3600, minimum=1)
# How often a process reads the rate card in force from the ledger (webapp/fleet/rate_card.py).
RATE_CARD_REFRESH_S = env_int("RATE_CARD_REFRESH_S", 30, minimum=0)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

# Pages in English or Simplified Chinese, from the browser's Accept-Language or the switch on
# every page; the API's error codes stay the same in both (only messages are translated).
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "webapp" / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
LOGIN_URL = "/admin/login/"

# Request bodies (JSON and forms alike) above this are refused with 413.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int(
    "REQUEST_BODY_MAX_BYTES", 1024 * 1024, minimum=1024, maximum=64 * 1024 * 1024
)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["webapp.tenancy.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["webapp.tenancy.authentication.HasTenantScope"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PARSER_CLASSES": ["webapp.core.api.parsers.BoundedJSONParser"],
    "DEFAULT_PAGINATION_CLASS": "webapp.core.api.pagination.BoundedLimitOffsetPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "webapp.core.api.errors.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": [
        "webapp.core.api.throttling.ClientAddressRateThrottle",
        "webapp.core.api.throttling.CallerRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "key": env_rate("API_RATE_PER_KEY", "20/s"),
        "node": env_rate("AGENT_RATE_PER_NODE", "30/min"),
        "ip": env_rate("API_RATE_PER_IP", "50/s"),
        "auth_failure": env_rate("API_AUTH_FAILURES_PER_IP", "20/min"),
    },
    # Proxies in front of the server that append to X-Forwarded-For: 0 trusts no header
    # and throttles by the connecting address.
    "NUM_PROXIES": env_int("NUM_PROXIES", 0, maximum=10),
    "DEFAULT_SCHEMA_CLASS": "webapp.core.openapi.ErrorsAutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Wattlease tenant API",
    "VERSION": "1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "PREPROCESSING_HOOKS": ["webapp.core.openapi.only_versioned_paths"],
}

# HTTPS only in production: cookies, redirects and HSTS. Behind a proxy that terminates
# TLS, BEHIND_TLS_PROXY=1 trusts its X-Forwarded-Proto (and only then: a client could send
# the header itself).
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = PRODUCTION
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", PRODUCTION)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 365 * 24 * 3600 if PRODUCTION else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", PRODUCTION)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", PRODUCTION)
if env_bool("BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "webapp.observability.jsonlog.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"daphne": {"level": "WARNING"}, "django.channels.server": {"level": "WARNING"}},
}

STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "webapp.dashboard.finders.PlotlyJsFinder",
]
# The operator dashboard (every tenant's costs) needs a staff login; only a development
# run may open it to anyone.
DASHBOARD_LOGIN_REQUIRED = env_bool("DASHBOARD_LOGIN_REQUIRED", True)
if PRODUCTION and not DASHBOARD_LOGIN_REQUIRED:
    raise ImproperlyConfigured(
        "DASHBOARD_LOGIN_REQUIRED=0 is refused when WATTLEASE_ENV=production; "
        "the dashboard shows every tenant's costs"
    )

# PEM files (roots and intermediates) that EK certificates must chain to. The demo puts its
# swtpm CA here; production points it at the TPM vendors' EK CAs.
TPM_EK_CA_DIR = Path(env_str("TPM_EK_CA_DIR", str(DATA_DIR / "tpm" / "ek-ca")))
# Each organisation's registrar (`python -m attest registrar serve`, docs/operations.md,
# "Registrars"): "Org1MSP=http://host:port,Org2MSP=http://host:port". Enrolment relays the
# node's credential round to every one; the ledger wants an AK certificate from each.
REGISTRARS = registrar_urls(env_str("REGISTRARS", ""))

# The organisation (MSP id) this deployment submits as, and the channel's organisations
# (only used when the embedded ledger file is created: they go into its genesis block).
LEDGER_ORG = env_str("LEDGER_ORG", "Org1MSP")
LEDGER_ORGS = tuple(o for o in env_str("LEDGER_ORGS", "Org1MSP,Org2MSP").split(",") if o)
OUTBOX_BATCH = env_int("OUTBOX_BATCH", 100, minimum=1, maximum=10_000)
# A relay that died mid-send leaves its rows "sending"; another relay takes them back after
# this long (long enough that a live relay has surely collected their receipts).
OUTBOX_STALE_CLAIM_S = env_int("OUTBOX_STALE_CLAIM_S", 120, minimum=1)

# -- Observability (docs/operations.md, "Observability") --
# Log lines as JSON objects (request id, tenant, lease, ledger tx id, trace id) or as text.
LOG_FORMAT = env_choice("LOG_FORMAT", "json" if PRODUCTION else "text", ("json", "text"))
if LOG_FORMAT == "json":
    LOGGING["handlers"]["console"]["formatter"] = "json"
# Who may read /metrics: these networks (loopback by default), or a caller presenting
# `Authorization: Bearer <METRICS_TOKEN>`. Anyone else gets a 404.
METRICS_ALLOWED_NETWORKS = env_networks("METRICS_ALLOWED_NETWORKS", "127.0.0.1/32,::1/128")
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
# OTLP/HTTP collector base URL (Jaeger all-in-one: http://127.0.0.1:4318); empty: no tracing.
OTEL_EXPORTER_OTLP_ENDPOINT = env_str("OTEL_EXPORTER_OTLP_ENDPOINT", "")
OTEL_SERVICE_NAME = env_str("OTEL_SERVICE_NAME", "wattlease")
