"""Tooling that builds Hyperledger Fabric's binaries for the Fabric backend's network."""

from __future__ import annotations

from chaincode_client.fabric_network.build import (
    FABRIC_COMMIT,
    FABRIC_MODULE,
    FABRIC_PSEUDO_VERSION,
    BuildError,
    BuildResult,
    BuildSpec,
    build,
)

__all__ = [
    "FABRIC_COMMIT",
    "FABRIC_MODULE",
    "FABRIC_PSEUDO_VERSION",
    "BuildError",
    "BuildResult",
    "BuildSpec",
    "build",
]
