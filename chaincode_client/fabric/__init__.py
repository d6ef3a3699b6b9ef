"""Fabric Gateway backend: `LEDGER_BACKEND=fabric` with the FABRIC_* settings in config.py."""

from __future__ import annotations

from chaincode_client.fabric.client import FabricGatewayClient
from chaincode_client.fabric.config import ENV_VARS, ConfigError, FabricSettings
from chaincode_client.fabric.identity import Identity, IdentityError, Signer, load_msp

__all__ = [
    "ENV_VARS",
    "ConfigError",
    "FabricGatewayClient",
    "FabricSettings",
    "Identity",
    "IdentityError",
    "Signer",
    "load_msp",
]
