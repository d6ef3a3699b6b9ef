"""Cross-cutting pieces: the audit log and after-commit event publishing."""
