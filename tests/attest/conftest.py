"""Real swtpm fixtures. Session-scoped so the suite starts each TPM once; they FAIL (never
skip) when swtpm is missing: `attest.swtpm.require` raises SwtpmError."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from attest.swtpm import LocalCA, Swtpm, start_node_tpm


@dataclass
class Node:
    """One simulated node: its swtpm and the CA that certified its EK."""

    tpm: Swtpm
    ca: LocalCA

    @property
    def tcti(self) -> str:
        return self.tpm.tcti


@pytest.fixture(scope="session")
def local_ca(tmp_path_factory: pytest.TempPathFactory) -> LocalCA:
    return LocalCA(tmp_path_factory.mktemp("localca"))


@pytest.fixture(scope="session")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> LocalCA:
    return LocalCA(tmp_path_factory.mktemp("otherca"))


def _node(
    tmp_path_factory: pytest.TempPathFactory, name: str, ca: LocalCA, banks: str = "sha256"
) -> Iterator[Node]:
    tpm = start_node_tpm(tmp_path_factory.mktemp(name), ca, pcr_banks=banks)
    try:
        yield Node(tpm, ca)
    finally:
        tpm.stop()


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory, local_ca: LocalCA) -> Iterator[Node]:
    yield from _node(tmp_path_factory, "node", local_ca)


@pytest.fixture(scope="session")
def other_node(tmp_path_factory: pytest.TempPathFactory, other_ca: LocalCA) -> Iterator[Node]:
    """A second TPM whose EK certificate comes from a CA the verifier does not trust."""
    yield from _node(tmp_path_factory, "other", other_ca)


@pytest.fixture(scope="session")
def tools_node(tmp_path_factory: pytest.TempPathFactory, local_ca: LocalCA) -> Iterator[Node]:
    """A TPM reserved for tpm2-tools (swtpm serves one client connection at a time)."""
    yield from _node(tmp_path_factory, "tools", local_ca)


@pytest.fixture(scope="session")
def boot_node(tmp_path_factory: pytest.TempPathFactory, local_ca: LocalCA) -> Iterator[Node]:
    """A TPM with SHA-1, SHA-256 and SHA-384 banks, for measured-boot logs and IMA: tests
    reboot it (`reboot`) to start from fresh PCRs."""
    yield from _node(tmp_path_factory, "boot", local_ca, "sha1,sha256,sha384")


def reboot(node: Node, locality: int = 0) -> Node:
    """Power-cycle in order (TPM2_Shutdown, then TPM2_Startup(CLEAR) at `locality`): every
    PCR back to its reset value, as at a machine's boot."""
    node.tpm.stop()
    node.tpm.startup_locality = locality
    node.tpm.start()
    return node


@pytest.fixture
def nonce() -> bytes:
    return os.urandom(32)
