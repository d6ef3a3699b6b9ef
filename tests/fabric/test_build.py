"""The pinned, cached Fabric build: cache logic through a real `go install` from a local
module proxy, and the real pinned build (marker `fabric`), which must fail loudly, never skip,
when Go or the proxy is missing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from chaincode_client.fabric_network.build import (
    STAMP_NAME,
    BuildError,
    BuildSpec,
    build,
    build_dir,
    read_stamp,
)
from tests.fabric.goproxy import DEMO_MODULE, DEMO_PACKAGES, DEMO_VERSION, make_proxy, proxy_env

DEMO_SPEC = BuildSpec(module=DEMO_MODULE, commit=DEMO_VERSION, packages=DEMO_PACKAGES)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = make_proxy(tmp_path_factory.mktemp("goproxy"))
    gopath = tmp_path_factory.mktemp("gopath")
    # A private GOPATH/module cache, so the test never touches the developer's own.
    env = {**os.environ, "GOPATH": str(gopath), "GOMODCACHE": str(gopath / "mod")}
    return proxy_env(folder, env)


def test_builds_every_package_then_reuses_the_cache(proxy: dict[str, str], tmp_path: Path):
    lines: list[str] = []
    first = build(DEMO_SPEC, tmp_path, proxy, lines.append)
    assert not first.cached
    assert (first.root / "bin" / "hello").is_file()
    assert (first.root / "ccaas" / "bin" / "detect").is_file()
    assert any(line.startswith("[1/2] go install") for line in lines)
    stamp = json.loads((first.root / STAMP_NAME).read_text())
    assert set(stamp["binaries"]) == {"bin/hello", "ccaas/bin/detect"}

    second = build(DEMO_SPEC, tmp_path, proxy, lines.append)
    assert second.cached
    assert second.binaries == first.binaries


def test_rebuilds_when_a_cached_binary_was_changed(proxy: dict[str, str], tmp_path: Path):
    first = build(DEMO_SPEC, tmp_path, proxy, lambda _: None)
    (first.root / "bin" / "hello").write_bytes(b"not the binary we built")
    assert read_stamp(DEMO_SPEC, tmp_path) is None
    again = build(DEMO_SPEC, tmp_path, proxy, lambda _: None)
    assert not again.cached
    assert read_stamp(DEMO_SPEC, tmp_path) is not None


def test_a_failed_build_leaves_no_cache_that_looks_complete(proxy: dict[str, str], tmp_path: Path):
    broken = BuildSpec(
        module=DEMO_MODULE, commit=DEMO_VERSION, packages=(*DEMO_PACKAGES, ("cmd/absent", "bin"))
    )
    with pytest.raises(BuildError, match="cmd/absent"):
        build(broken, tmp_path, proxy, lambda _: None)
    assert not build_dir(broken, tmp_path).exists()
    assert list(build_dir(broken, tmp_path).parent.iterdir()) == []


def test_missing_go_fails_with_a_clear_message(tmp_path: Path):
    env = {**os.environ, "PATH": str(tmp_path)}
    with pytest.raises(BuildError, match="not on PATH"):
        build(DEMO_SPEC, tmp_path, env, lambda _: None)


@pytest.mark.fabric
def test_pinned_fabric_binaries_build_or_come_from_the_cache():
    """The real pinned build of v2.5.16 from the Go module proxy. It FAILS where the proxy
    does not serve github.com/hyperledger/fabric; it never skips."""
    result = build(BuildSpec())
    for rel in BuildSpec().binaries():
        assert (result.root / rel).is_file(), rel
