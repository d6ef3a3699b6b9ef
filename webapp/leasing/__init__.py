"""Leases, their state machine (changed only through actions) and settlements."""
