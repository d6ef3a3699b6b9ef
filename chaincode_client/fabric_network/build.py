"""Build pinned Go programs with `go install`, cached: Hyperledger Fabric's own binaries
(pinned by commit), and any other tool given as a `BuildSpec` (Prometheus, promtool and
Jaeger: `webapp/observability/binaries.py`).

The binaries land in `${WATTLEASE_CACHE:-~/.cache/wattlease}/<name>/<commit>/` — outside any
clone, keyed by the tool and its pinned commit or tag — so a second CI run finds them and
skips the build. A stamp file
records what was built (module, version, Go version, sha256 of each binary); the cache counts
only when the stamp and every binary agree, so a half-finished or tampered cache is rebuilt.
Each build installs into a fresh temporary folder that is renamed into place at the end: an
interrupted build never leaves a cache that looks complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

FABRIC_MODULE = "github.com/hyperledger/fabric"
# v2.5.16, the LTS line. The module path has no /v2 suffix, so Go only accepts it by commit.
FABRIC_COMMIT = "f871cf92a026aba7b12e6f06d71ded3e6e659d71"
FABRIC_PSEUDO_VERSION = "v1.4.0-rc1.0.20260617221605-f871cf92a026"
# (package path inside the module, sub-folder of the cache dir its binary goes to). The CCaaS
# builder sits in its own folder because a peer's externalBuilders entry names a directory
# whose bin/ holds exactly detect, build and release.
FABRIC_PACKAGES: tuple[tuple[str, str], ...] = (
    ("cmd/peer", "bin"),
    ("cmd/orderer", "bin"),
    ("cmd/configtxgen", "bin"),
    ("cmd/cryptogen", "bin"),
    ("cmd/osnadmin", "bin"),
    ("ccaas_builder/cmd/detect", "ccaas/bin"),
    ("ccaas_builder/cmd/build", "ccaas/bin"),
    ("ccaas_builder/cmd/release", "ccaas/bin"),
)
STAMP_NAME = "stamp.json"
STAMP_FORMAT = 1
# One package at a time: the CI machine has 2 cores shared with other jobs.
DEFAULT_GOFLAGS = "-p=1 -trimpath"
GO_INSTALL_TIMEOUT_S = 1800
# Lines of `go` output kept for an error message: enough to show the cause, not a wall.
ERROR_TAIL_LINES = 12


class BuildError(Exception):
    """The pinned build could not be completed; the message says which step and why."""


@dataclass(frozen=True)
class BuildSpec:
    """What to `go install`: a module at a pinned commit or release tag (`commit`), its
    packages with the cache sub-folder each binary goes to, and the tool's `name` (the
    cache folder and the name in progress lines)."""

    module: str = FABRIC_MODULE
    commit: str = FABRIC_COMMIT
    packages: tuple[tuple[str, str], ...] = FABRIC_PACKAGES
    name: str = "fabric"
    # `go install pkg@version` refuses a module whose go.mod has replace directives (Jaeger's
    # has); such a module is built with `go build` in its own source folder instead.
    as_main_module: bool = False

    def binaries(self) -> list[Path]:
        """Paths of the built binaries, relative to the cache dir."""
        return [Path(sub) / Path(pkg).name for pkg, sub in self.packages]


@dataclass(frozen=True)
class BuildResult:
    root: Path  # <cache>/<name>/<commit>
    cached: bool  # True when the stamp matched and nothing was built
    seconds: float
    go_version: str
    binaries: dict[str, str] = field(default_factory=dict)  # relative path -> sha256

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def ccaas_builder_dir(self) -> Path:
        """The folder a peer's core.yaml names as an external builder's `path`."""
        return self.root / "ccaas"


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("WATTLEASE_CACHE") or str(Path.home() / ".cache" / "wattlease")
    return Path(base)


def build_dir(spec: BuildSpec, root: Path) -> Path:
    return root / spec.name / spec.commit


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _go_version(env: Mapping[str, str]) -> str:
    go = shutil.which("go", path=env.get("PATH"))
    if go is None:
        raise BuildError("the Go toolchain (`go`) is not on PATH: install Go >= 1.23 first")
    out = subprocess.run(
        [go, "version"], capture_output=True, text=True, env=dict(env), check=False
    )
    if out.returncode != 0:
        raise BuildError(f"`go version` failed: {out.stderr.strip()[:500]}")
    return out.stdout.strip()


def read_stamp(spec: BuildSpec, root: Path) -> dict[str, object] | None:
    """The stamp of a complete earlier build of `spec`, or None when the cache cannot be
    trusted (missing, unreadable, for another spec, or a binary missing or changed)."""
    folder = build_dir(spec, root)
    try:
        stamp = json.loads((folder / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("format") != STAMP_FORMAT:
        return None
    if stamp.get("module") != spec.module or stamp.get("commit") != spec.commit:
        return None
    recorded = stamp.get("binaries")
    if not isinstance(recorded, dict):
        return None
    for rel in spec.binaries():
        path = folder / rel
        if not path.is_file() or recorded.get(str(rel)) != _sha256(path):
            return None
    return stamp


def _diagnose(module: str, version: str, output: str, env: Mapping[str, str]) -> str:
    """Turn `go install` output into the cause an operator can act on."""
    tail = "\n".join(output.strip().splitlines()[-ERROR_TAIL_LINES:])
    proxy = env.get("GOPROXY") or "the default GOPROXY"
    if "403 Forbidden" in output or "404 Not Found" in output or "not available" in output:
        return (
            f"the Go module proxy ({proxy}) refused {module}@{version}; this machine cannot "
            f"download its source. Point GOPROXY at a proxy that serves it (or pre-fill "
            f"the module cache) and run again.\n{tail}"
        )
    if "verifying" in output and ("sum.golang.org" in output or "checksum" in output):
        return (
            f"the checksum database could not verify {module}@{version} (GOSUMDB="
            f"{env.get('GOSUMDB') or 'sum.golang.org'}); see docs/fabric.md, 'Checksums'.\n{tail}"
        )
    return f"go install {module}/...@{version} failed:\n{tail}"


def _module_dir(spec: BuildSpec, env: dict[str, str]) -> Path:
    """The module's source in the Go module cache (downloaded if need be; read-only)."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{spec.module}@{spec.commit}"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if out.returncode != 0:
        raise BuildError(_diagnose(spec.module, spec.commit, out.stdout + out.stderr, env))
    return Path(json.loads(out.stdout)["Dir"])


def _install(
    spec: BuildSpec,
    pkg: str,
    gobin: Path,
    env: dict[str, str],
    log: Callable[[str], None],
    module_dir: Path | None = None,
) -> None:
    """`go install module/pkg@version` into `gobin`; or, given the module's source folder,
    `go build` there with the module as the main module (its replace directives apply)."""
    target = f"{spec.module}/{pkg}@{spec.commit}"
    if module_dir is None:
        cmd, cwd, run_env = ["go", "install", target], None, {**env, "GOBIN": str(gobin)}
    else:
        gobin.mkdir(parents=True, exist_ok=True)
        cmd = ["go", "build", "-o", str(gobin / Path(pkg).name), f"./{pkg}"]
        cwd, run_env = module_dir, env
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:  # streamed so a long download/compile shows progress
        lines.append(line.rstrip())
        log(f"    {line.rstrip()}")
    try:
        code = proc.wait(timeout=GO_INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.wait()
        raise BuildError(f"go {cmd[1]} {target} ran past {GO_INSTALL_TIMEOUT_S}s") from exc
    if code != 0:
        raise BuildError(_diagnose(spec.module, spec.commit, "\n".join(lines), env))


def build(
    spec: BuildSpec | None = None,
    root: Path | None = None,
    env: Mapping[str, str] | None = None,
    log: Callable[[str], None] = print,
) -> BuildResult:
    """Install the pinned binaries into the cache, or reuse a complete earlier build."""
    spec = spec or BuildSpec()
    base_env = dict(os.environ if env is None else env)
    base_env.setdefault("GOFLAGS", DEFAULT_GOFLAGS)
    root = root or cache_root(base_env)
    folder = build_dir(spec, root)
    started = time.monotonic()
    go_version = _go_version(base_env)
    stamp = read_stamp(spec, root)
    if stamp is not None:
        log(f"{spec.name} binaries: cached at {folder} (built by {stamp.get('go_version')})")
        binaries = stamp["binaries"]
        assert isinstance(binaries, dict)
        return BuildResult(folder, True, time.monotonic() - started, go_version, dict(binaries))

    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{spec.commit[:12]}-", dir=folder.parent))
    log(f"{spec.name} binaries: not in the cache; building {spec.module}@{spec.commit}")
    try:
        module_dir = _module_dir(spec, base_env) if spec.as_main_module else None
        verb = "go build" if module_dir else "go install"
        total = len(spec.packages)
        for i, (pkg, sub) in enumerate(spec.packages, 1):
            log(
                f"[{i}/{total}] {verb} {spec.module}/{pkg}@{spec.commit[:12]} "
                f"({time.monotonic() - started:.0f}s elapsed)"
            )
            _install(spec, pkg, staging / sub, base_env, log, module_dir)
        hashes = {str(rel): _sha256(staging / rel) for rel in spec.binaries()}
        stamp_data = {
            "format": STAMP_FORMAT,
            "module": spec.module,
            "commit": spec.commit,
            "go_version": go_version,
            "goflags": base_env["GOFLAGS"],
            "binaries": hashes,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (staging / STAMP_NAME).write_text(json.dumps(stamp_data, indent=2, sort_keys=True))
        if folder.exists():  # an incomplete or stale earlier build
            shutil.rmtree(folder)
        staging.rename(folder)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    seconds = time.monotonic() - started
    log(f"{spec.name} binaries: built into {folder} in {seconds:.0f}s")
    return BuildResult(folder, False, seconds, go_version, hashes)


def sampleconfig_dir(
    env: Mapping[str, str] | None = None, version: str = FABRIC_PSEUDO_VERSION
) -> Path:
    """Fabric's sample configuration in the module cache: read-only, copy what you need."""
    env = dict(os.environ if env is None else env)
    out = subprocess.run(
        ["go", "env", "GOMODCACHE"], capture_output=True, text=True, env=env, check=False
    )
    if out.returncode != 0:
        raise BuildError(f"`go env GOMODCACHE` failed: {out.stderr.strip()[:500]}")
    path = Path(out.stdout.strip()) / f"{FABRIC_MODULE}@{version}" / "sampleconfig"
    if not path.is_dir():
        raise BuildError(
            f"Fabric's sampleconfig is not in the module cache at {path}: run the build first"
        )
    return path
