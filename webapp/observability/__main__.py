"""`python -m webapp.observability build|status`: see `webapp.observability.binaries`."""

from __future__ import annotations

import argparse
import sys

from chaincode_client.fabric_network.build import BuildError, build_dir, cache_root, read_stamp
from webapp.observability.binaries import TOOLS, build_all


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m webapp.observability")
    parser.add_argument("command", choices=["build", "status"])
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            for result in build_all():
                how = "cached" if result.cached else "built"
                print(f"{how} in {result.seconds:.1f}s: {result.root}")
        except BuildError as exc:
            print(f"observability build FAILED: {exc}", file=sys.stderr)
            return 1
        return 0
    missing = 0
    for spec in TOOLS:
        stamp = read_stamp(spec, cache_root())
        where = build_dir(spec, cache_root())
        missing += stamp is None
        print(f"{spec.name} {spec.commit}: {'built at' if stamp else 'none at'} {where}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
