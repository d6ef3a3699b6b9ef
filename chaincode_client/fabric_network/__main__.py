"""`python -m chaincode_client.fabric_network build|status`.

`build` installs the pinned Fabric binaries into the cache (or reuses them) and prints the
time taken; `status` says whether a complete, verified build is cached. Exit code 0 on
success, 1 on a failed build or a missing/incomplete cache, so CI fails loudly.
"""

from __future__ import annotations

import argparse
import sys

from chaincode_client.fabric_network.build import (
    BuildError,
    BuildSpec,
    build,
    build_dir,
    cache_root,
    read_stamp,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaincode_client.fabric_network")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="go install the pinned Fabric binaries (cached)")
    sub.add_parser("status", help="is a complete, verified build cached?")
    args = parser.parse_args(argv)
    spec = BuildSpec()
    if args.command == "build":
        try:
            result = build(spec)
        except BuildError as exc:
            print(f"fabric build FAILED: {exc}", file=sys.stderr)
            return 1
        print(f"{'cached' if result.cached else 'built'} in {result.seconds:.1f}s: {result.root}")
        return 0
    stamp = read_stamp(spec, cache_root())
    where = build_dir(spec, cache_root())
    if stamp is None:
        print(f"no complete Fabric build at {where}")
        return 1
    print(f"Fabric {spec.commit[:12]} built by {stamp.get('go_version')} at {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
