"""Prometheus, promtool and Jaeger come from the same cached `go install` as Fabric's
binaries: here through a real Go toolchain and a module proxy in a folder (no network),
including a module whose go.mod has a replace directive, as Jaeger's does."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from chaincode_client.fabric_network.build import BuildError, BuildSpec, build
from tests.fabric.goproxy import DEMO_MODULE, DEMO_VERSION, add_module, make_proxy, proxy_env
from webapp.observability.binaries import BUILD_COMMAND, PROMETHEUS, MissingBinary, binary

REPLACING = "example.com/replacing"
REPLACING_VERSION = "v0.2.0"
GREETING = "built as the main module"


def add_replacing_module(folder: Path) -> None:
    """A module whose go.mod replaces another, which `go install ...@version` refuses."""
    main = f'package main\n\nimport "fmt"\n\nfunc main() {{ fmt.Println("{GREETING}") }}\n'
    replace = "\nreplace example.com/elsewhere => ./elsewhere\n"
    add_module(folder, REPLACING, REPLACING_VERSION, [("cmd/tool", main)], replace)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = make_proxy(tmp_path_factory.mktemp("goproxy"))
    add_replacing_module(folder)
    gopath = tmp_path_factory.mktemp("gopath")
    env = {**os.environ, "GOPATH": str(gopath), "GOMODCACHE": str(gopath / "mod")}
    return {**proxy_env(folder, env), "GONOSUMDB": f"{DEMO_MODULE},{REPLACING}"}


def test_a_tool_lands_in_its_own_cache_folder_and_is_found_there(proxy, tmp_path):
    spec = BuildSpec(DEMO_MODULE, DEMO_VERSION, (("cmd/hello", "bin"),), name="demo-tool")
    env = {**proxy, "WATTLEASE_CACHE": str(tmp_path)}
    lines: list[str] = []
    first = build(spec, env=env, log=lines.append)
    assert first.root == tmp_path / "demo-tool" / DEMO_VERSION and not first.cached
    assert "demo-tool binaries: not in the cache" in "\n".join(lines)
    assert binary(spec, "hello", env) == first.root / "bin" / "hello"
    assert build(spec, env=env, log=lines.append).cached


def test_a_module_with_replace_directives_is_built_as_the_main_module(proxy, tmp_path):
    packages = (("cmd/tool", "bin"),)
    installed = BuildSpec(REPLACING, REPLACING_VERSION, packages, name="replacing")
    with pytest.raises(BuildError, match="replace directives"):
        build(installed, tmp_path, proxy, lambda _: None)
    as_main = BuildSpec(
        REPLACING, REPLACING_VERSION, packages, name="replacing", as_main_module=True
    )
    result = build(as_main, tmp_path, proxy, lambda _: None)
    out = subprocess.run([result.root / "bin" / "tool"], capture_output=True, text=True)
    assert out.stdout.strip() == GREETING


def test_a_missing_tool_fails_naming_the_command_that_builds_it(tmp_path):
    with pytest.raises(MissingBinary, match=BUILD_COMMAND.replace(".", r"\.")) as caught:
        binary(PROMETHEUS, "promtool", {"WATTLEASE_CACHE": str(tmp_path)})
    assert str(tmp_path / "prometheus" / "v0.316.0") in str(caught.value)
