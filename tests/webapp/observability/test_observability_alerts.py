"""The alert rules, checked and unit-tested by the built promtool (`promtool check rules`,
`promtool test rules` on tests/webapp/observability/prometheus/alerts_test.yml); and the
unit tests are shown to catch a rule that drifted."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from tests.webapp.observability.binaries import require
from webapp.observability.binaries import PROMETHEUS

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "webapp" / "observability" / "prometheus" / "alerts.yml"
RULE_TESTS = Path(__file__).resolve().parent / "prometheus" / "alerts_test.yml"
PROMTOOL_TIMEOUT_S = 120


def promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(require(PROMETHEUS, "promtool")), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_S,
    )


def test_rules_pass_promtool_check():
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_rules_pass_their_unit_tests():
    # promtool reads rule_files as globs: a path that matches nothing loads no rule, and every
    # expected alert then fails as "got: []" with no word about the path
    for entry in yaml.safe_load(RULE_TESTS.read_text())["rule_files"]:
        assert (RULE_TESTS.parent / entry).resolve() == RULES.resolve(), entry
    result = promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_unit_tests_catch_a_rule_that_drifted(tmp_path: Path):
    """The same tests against a copy whose 5xx threshold slipped from 5 % to 50 %."""
    rules = tmp_path / "webapp" / "observability" / "prometheus" / "alerts.yml"
    rules.parent.mkdir(parents=True)
    original = RULES.read_text()
    assert original.count("> 0.05") == 1
    rules.write_text(original.replace("> 0.05", "> 0.5"))
    tests = tmp_path / "tests" / "webapp" / "prometheus" / "alerts_test.yml"
    tests.parent.mkdir(parents=True)
    shutil.copy(RULE_TESTS, tests)
    result = promtool("test", "rules", str(tests), cwd=tmp_path)
    assert result.returncode != 0
    assert "HighErrorRatio" in result.stdout + result.stderr
