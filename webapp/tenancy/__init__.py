"""Tenants and their API keys (prefixed, stored hashed, scoped, expiring)."""
