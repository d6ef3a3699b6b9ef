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
    module_dir = folder / DEMO_MODULE / "@v"
    module_dir.mkdir(parents=True)
    go_mod = f"module {DEMO_MODULE}\n\ngo 1.21\n"
    (module_dir / "list").write_text(DEMO_VERSION + "\n")
    (module_dir / f"{DEMO_VERSION}.info").write_text(
        json.dumps({"Version": DEMO_VERSION, "Time": "2026-01-01T00:00:00Z"})
    )
    (module_dir / f"{DEMO_VERSION}.mod").write_text(go_mod)
    prefix = f"{DEMO_MODULE}@{DEMO_VERSION}/"
    with zipfile.ZipFile(module_dir / f"{DEMO_VERSION}.zip", "w") as zf:
        zf.writestr(prefix + "go.mod", go_mod)
        for pkg, _ in DEMO_PACKAGES:
            zf.writestr(prefix + pkg + "/main.go", _MAIN % pkg)
    return folder


def proxy_env(folder: Path, base: dict[str, str]) -> dict[str, str]:
    return {
        **base,
        "GOPROXY": f"file://{folder}",
        "GONOSUMDB": DEMO_MODULE,  # a module made here has no checksum-database entry
        "GOFLAGS": "-p=1",
    }
