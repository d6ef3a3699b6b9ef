"""The embedded ledger engine: the Wattlease contract run in-process with Fabric's flow
(simulate → endorse → order → validate → commit), persisted in SQLite."""

from __future__ import annotations

from ledger.engine.core import EmbeddedLedger, EndorsementPolicy
from ledger.engine.msp import Identity

__all__ = ["EmbeddedLedger", "EndorsementPolicy", "Identity"]
