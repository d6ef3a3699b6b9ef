"""Prometheus, promtool and Jaeger's all-in-one, built from the Go module proxy at pinned
releases by the same cached, stamped `go install` as Fabric's binaries
(`chaincode_client.fabric_network.build`). No Django: the test runner calls it first.

    python -m webapp.observability build     # builds what the cache lacks, with progress
    python -m webapp.observability status    # where the binaries are, exit 1 if missing
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from chaincode_client.fabric_network.build import (
    BuildResult,
    BuildSpec,
    build,
    build_dir,
    cache_root,
    read_stamp,
)

PROMETHEUS = BuildSpec(
    module="github.com/prometheus/prometheus",
    commit="v0.316.0",
    packages=(("cmd/prometheus", "bin"), ("cmd/promtool", "bin")),
    name="prometheus",
)
# Jaeger v1.75.0's `cmd/jaeger` is the all-in-one (collector, query, in-memory storage).
# Its go.mod replaces a module, so `go install ...@v1.75.0` refuses it: it is built in its
# own source folder from the module cache, pinned all the same by the module's go.sum.
JAEGER = BuildSpec(
    module="github.com/jaegertracing/jaeger",
    commit="v1.75.0",
    packages=(("cmd/jaeger", "bin"),),
    name="jaeger",
    as_main_module=True,
)
TOOLS = (PROMETHEUS, JAEGER)
BUILD_COMMAND = "python -m webapp.observability build"


class MissingBinary(Exception):
    """A tool the observability tests need is not built; the message says how to build it."""


def build_all(
    env: Mapping[str, str] | None = None, log: Callable[[str], None] = print
) -> list[BuildResult]:
    """Build every observability tool the cache lacks (a second run finds them cached)."""
    return [build(spec, env=env, log=log) for spec in TOOLS]


def binary(spec: BuildSpec, name: str, env: Mapping[str, str] | None = None) -> Path:
    """The verified cached binary `name` of `spec`, or MissingBinary saying how to build it."""
    root = cache_root(env)
    folder = build_dir(spec, root)
    if read_stamp(spec, root) is None:
        raise MissingBinary(
            f"no verified {spec.name} {spec.commit} build at {folder}: run `{BUILD_COMMAND}` "
            f"(or `make observability`; `make test` runs it first)"
        )
    return folder / "bin" / name
