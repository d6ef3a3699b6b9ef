"""The kernel every app may import and that imports no app: the audit log, after-commit
event publishing, the API's shared pieces (errors, parsers, pagination, throttling, OpenAPI),
tokens, the worker loop and the one-time secrets page."""
