"""Attestation challenges and verdicts for nodes."""
