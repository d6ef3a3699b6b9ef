"""Fixtures shared by several test packages."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def fabric_network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real Fabric network (3 Raft orderers, 2 organisations) for the whole session. Fails,
    never skips, when Fabric's binaries are missing: `make test` decides whether `fabric`
    tests run at all and says so."""
    from tests.fabric.network_fixture import start_network

    yield from start_network(tmp_path_factory.mktemp("fabric"))
