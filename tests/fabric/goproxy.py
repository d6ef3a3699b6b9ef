"""A Go module proxy in a folder (GOPROXY=file://...), laid out as the GOPROXY protocol says,
serving a tiny module made at test time. It lets the build's cache logic run through a real
`go install` without reaching the network."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

DEMO_MODULE = "example.com/wattdemo"
DEMO_VERSION = "v0.1.0"
DEMO_PACKAGES = (("cmd/hello", "bin"), ("builder/cmd/detect", "ccaas/bin"))

_MAIN = 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("%s") }\n'


def make_proxy(folder: Path) -> Path:
    """Write the proxy into `folder` and return it."""
    add_module(folder, DEMO_MODULE, DEMO_VERSION, [(pkg, _MAIN % pkg) for pkg, _ in DEMO_PACKAGES])
    return folder


def add_module(
    folder: Path, module: str, version: str, mains: list[tuple[str, str]], go_mod_tail: str = ""
) -> None:
    """Serve `module@version` from the proxy in `folder`: a go.mod (plus `go_mod_tail`, e.g.
    a replace directive) and, for each (package path, source), a main.go."""
    module_dir = folder / module / "@v"
    module_dir.mkdir(parents=True)
    go_mod = f"module {module}\n\ngo 1.21\n{go_mod_tail}"
    (module_dir / "list").write_text(version + "\n")
    (module_dir / f"{version}.info").write_text(
        json.dumps({"Version": version, "Time": "2026-01-01T00:00:00Z"})
    )
    (module_dir / f"{version}.mod").write_text(go_mod)
    prefix = f"{module}@{version}/"
    with zipfile.ZipFile(module_dir / f"{version}.zip", "w") as zf:
        zf.writestr(prefix + "go.mod", go_mod)
        for pkg, source in mains:
            zf.writestr(prefix + pkg + "/main.go", source)


def proxy_env(folder: Path, base: dict[str, str]) -> dict[str, str]:
    return {
        **base,
        "GOPROXY": f"file://{folder}",
        "GONOSUMDB": DEMO_MODULE,  # a module made here has no checksum-database entry
        "GOFLAGS": "-p=1",
    }
