"""A sample of the mutation testing, small enough for every CI run.

`make mutation` mutates all the contract's checks and the auditor (`[tool.mutmut]` of
pyproject.toml) and takes hours here. This runs the same tool, mutmut, on SAMPLE: a module
and the fast tests that must kill every one of its mutants, in a copy of the tree whose
`[tool.mutmut]` names only those. Any mutant that survives (or that mutmut could not decide)
fails the run, with the command that shows it.

    python -m tests.mutation_sample [--keep DIR] [--module PATH --tests TEST...]

`--keep DIR` runs in DIR (made, or emptied) and leaves it there: `cd DIR && mutmut show NAME`
shows a survivor. `--module` and `--tests` run another module against other tests instead of
SAMPLE (one module of `make mutation` at a time, in minutes rather than hours).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTMUT = Path(sys.executable).with_name("mutmut")
# module -> the tests that must kill each of its mutants (seconds, not minutes: no swtpm)
SAMPLE = {
    "ledger/audit/validity.py": ["tests/adversary/test_validity_chain.py"],
    "ledger/audit/bill_whole.py": ["tests/adversary/test_bill_whole.py"],
    "ledger/contract/args.py": ["tests/ledger/test_contract_args_edges.py"],
    # what Slurm answers (untrusted): every field check of the grants, gates and jobs
    "scheduler/grants/slurm_json.py": [
        "tests/scheduler/test_slurm_json.py",
        "tests/scheduler/test_grants_parsing.py",
    ],
}
NOT_COPIED = (".git", ".venv", "var", "mutants", "node_modules", ".mypy_cache", ".ruff_cache")
RESULT_RE = re.compile(r"^\s*(\S+): (\w[\w ]*)$")


def sample_config(pyproject: str, modules: list[str], tests: list[str]) -> str:
    """pyproject.toml with `[tool.mutmut]` narrowed to `modules` (and the packages they are
    in) and `tests`."""

    def toml_list(items: list[str]) -> str:
        return "[" + ", ".join(f'"{item}"' for item in items) + "]"

    start = pyproject.index("[tool.mutmut]")
    end = pyproject.find("\n[", start + 1)
    end = len(pyproject) if end < 0 else end
    section = pyproject[start:end]

    def toml_items(key: str) -> list[str]:
        found = re.search(rf"^{key} = \[(.*?)\]", section, flags=re.S | re.M)
        return re.findall(r'"([^"]+)"', found.group(1)) if found else []

    # the packages the modules are in are mutated; every other package is copied as it is
    sources = sorted({module.split("/", 1)[0] + "/" for module in modules})
    packages = toml_items("source_paths") + toml_items("also_copy")
    copied = [item for item in dict.fromkeys(packages) if item not in sources]
    for key, items in (
        ("source_paths", sources),
        ("also_copy", copied),
        ("only_mutate", modules),
        ("pytest_add_cli_args_test_selection", tests),
    ):
        section, found = re.subn(
            rf"^{key} = \[.*?\]", f"{key} = {toml_list(items)}", section, flags=re.S | re.M
        )
        if found != 1:
            raise SystemExit(f"pyproject.toml: [tool.mutmut] has no single `{key}` list")
    return pyproject[:start] + section + pyproject[end:]


def results(workdir: Path) -> dict[str, str]:
    out = subprocess.run(
        [str(MUTMUT), "results", "--all", "true"],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {m.group(1): m.group(2) for m in map(RESULT_RE.match, out.splitlines()) if m}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="run in this folder and keep it")
    parser.add_argument("--module", action="append", help="mutate this module, not SAMPLE's")
    parser.add_argument("--tests", nargs="+", help="with --module: the tests that kill")
    args = parser.parse_args(argv)
    if bool(args.module) != bool(args.tests):
        parser.error("--module and --tests go together")
    keep = args.keep
    modules = args.module or list(SAMPLE)
    tests = sorted(args.tests or {t for ts in SAMPLE.values() for t in ts})
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="wattlease-mutation-") as tmp:
        workdir = keep.resolve() if keep else Path(tmp) / "tree"
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.copytree(ROOT, workdir, ignore=shutil.ignore_patterns(*NOT_COPIED))
        pyproject = workdir / "pyproject.toml"
        pyproject.write_text(sample_config(pyproject.read_text(), modules, tests))
        print(f"mutation sample: {', '.join(modules)} against {', '.join(tests)}", flush=True)
        env = {**os.environ, "WATTLEASE_ENV": "development"}
        run = subprocess.run(
            [str(MUTMUT), "run"], cwd=workdir, env=env, capture_output=True, text=True
        )
        if run.returncode != 0:
            print(run.stdout[-4000:], run.stderr[-4000:], sep="\n")
            print(f"mutmut run failed (exit {run.returncode})")
            return 1
        found = results(workdir)
    alive = {name: status for name, status in found.items() if status != "killed"}
    print(
        f"mutation sample: {len(found) - len(alive)} of {len(found)} mutants killed "
        f"in {time.monotonic() - started:.0f} s"
    )
    if not found:
        print("mutmut produced no mutant: the sample's configuration is wrong")
        return 1
    for name, status in sorted(alive.items()):
        print(f"  {status}: {name}")
    if alive:
        print("see one: python -m tests.mutation_sample --keep DIR; cd DIR; mutmut show NAME")
    return 1 if alive else 0


if __name__ == "__main__":
    sys.exit(main())
