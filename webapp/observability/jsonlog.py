"""Log records as one JSON object a line, with what the line is about: the request id,
tenant, lease and ledger tx id of the current context (`webapp.observability.context`) and
the current trace and span ids, so a log line leads to its trace in Jaeger and back."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

from webapp.observability import context

# Attributes every LogRecord has; anything else on a record came from `extra=` and is logged.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


def _trace_ids() -> dict[str, str | None]:
    span = trace.get_current_span().get_span_context()
    if not span.is_valid:
        return {"trace_id": None, "span_id": None}
    return {"trace_id": f"{span.trace_id:032x}", "span_id": f"{span.span_id:016x}"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **context.current(),
            **_trace_ids(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)
