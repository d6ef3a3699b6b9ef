"""Django settings for Wattlease. Everything that varies between machines comes from the
environment (see the configuration table in README.md) and is validated here."""

from __future__ import annotations

from pathlib import Path

from webapp.config import (
    database_from_url,
    env_bool,
    env_choice,
    env_int,
    env_networks,
    env_str,
    redis_url,
    secret_key,
)

BASE_DIR = Path(__file__).resolve().parent.parent

WATTLEASE_ENV = env_choice("WATTLEASE_ENV", "development", ("development", "production"))
PRODUCTION = WATTLEASE_ENV == "production"
DATA_DIR = Path(env_str("WATTLEASE_DATA_DIR", str(BASE_DIR / "var"))).resolve()

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
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "webapp.core",
    "webapp.tenancy",
    "webapp.fleet",
    "webapp.attestation",
    "webapp.leasing",
    "webapp.outbox",
    "webapp.dashboard",
    "webapp.observability",
]

MIDDLEWARE = [
    "webapp.observability.middleware.ObservabilityMiddleware",  # first: times everything
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

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
            ],
        },
    },
]

DATABASES = {
    "default": database_from_url(
        env_str("DATABASE_URL", f"sqlite:///{DATA_DIR / 'wattlease.sqlite3'}"), BASE_DIR
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

LEDGER_BACKEND = env_choice("LEDGER_BACKEND", "embedded", ("embedded", "fabric"))
LEDGER_PATH = Path(env_str("LEDGER_PATH", str(DATA_DIR / "ledger.sqlite3")))
TELEMETRY_SOURCE = env_choice("TELEMETRY_SOURCE", "replay", ("replay", "nvml"))
# How often the server challenges each node for a fresh quote, and how long a good quote
# keeps a node leasable when its PCR policy sets no age of its own.
ATTESTATION_INTERVAL_S = env_int("ATTESTATION_INTERVAL_S", 60, minimum=1)
ATTESTATION_MAX_AGE_S = env_int("ATTESTATION_MAX_AGE_S", 300, minimum=1)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
LOGIN_URL = "/admin/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["webapp.tenancy.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["webapp.tenancy.authentication.HasTenantScope"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Wattlease tenant API",
    "VERSION": "1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True

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
DASHBOARD_LOGIN_REQUIRED = env_bool("DASHBOARD_LOGIN_REQUIRED", PRODUCTION)

# PEM files (roots and intermediates) that EK certificates must chain to. The demo puts its
# swtpm CA here; production points it at the TPM vendors' EK CAs.
TPM_EK_CA_DIR = Path(env_str("TPM_EK_CA_DIR", str(DATA_DIR / "tpm" / "ek-ca")))

# The organisation (MSP id) this deployment submits as, and the channel's organisations
# (only used when the embedded ledger file is created: they go into its genesis block).
LEDGER_ORG = env_str("LEDGER_ORG", "Org1MSP")
LEDGER_ORGS = tuple(o for o in env_str("LEDGER_ORGS", "Org1MSP,Org2MSP").split(",") if o)
OUTBOX_BATCH = env_int("OUTBOX_BATCH", 100, minimum=1, maximum=10_000)

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
