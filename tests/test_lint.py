"""Fixit rules (adopter_codemods.lint): one per registry rule, Fixit's own VALID/INVALID helper, positions, the
combined autofix, ``# lint-ignore``, and ``fixit lint`` / ``fixit fix`` as subprocesses on a throwaway project.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

import click
import fixit
import pytest
from fixit import LintRule
from fixit import cli as fixit_cli
from fixit.config import walk_module
from fixit.engine import LintRunner
from fixit.ftypes import Config, LintViolation
from fixit.testing import generate_lint_rule_test_cases

import adopter_codemods.lint as lint
from adopter_codemods.api import rewrite_source, scan_source
from adopter_codemods.gc_pause import CollectorHold
from adopter_codemods.lint.mode import lint_without_diff
from adopter_codemods.rules import builtin_rules, default_rules
from conftest import FIXTURES, ROOT, expected_path, fixture_cases, is_negative, rule_code

EXAMPLE = ROOT / "adopter_codemods" / "examples" / "bert_like.py"
RULE_CLASSES: list[type[LintRule]] = [getattr(lint, r.name) for r in builtin_rules()]


def lint_source(
    source: str, rules: Optional[Sequence[type[LintRule]]] = None
) -> tuple[LintRunner, list[LintViolation]]:
    path = Path("model.py")
    runner = LintRunner(path, source.encode())
    violations = list(runner.collect_violations([r() for r in rules or RULE_CLASSES], Config(path=path)))
    return runner, violations


def test_one_lint_rule_per_registry_rule() -> None:
    loaded = walk_module(lint)  # what `[tool.fixit] enable = ["adopter_codemods.lint"]` collects
    assert sorted(loaded) == sorted(r.name for r in builtin_rules())
    for rule in builtin_rules():
        cls = loaded[rule.name]
        assert cls.RULE is rule  # type: ignore[attr-defined]
        assert not cls.get_inherited_dependencies()  # no metadata pass besides Fixit's own visit (docs/PERFORMANCE.md)
        assert cls.__module__ == "adopter_codemods.lint" and cls.__doc__
        cases = [c for c in fixture_cases() if rule_code(c) == rule.code]
        assert len(cls.VALID) == sum(is_negative(c) for c in cases)
        positives = [c for c in cases if not is_negative(c) and expected_path(c).exists()]
        # Fixit runs a case without its path: one importing a package next to it is linted below instead.
        assert len(cls.INVALID) == len([c for c in positives if c != CROSS_FILE])


CROSS_FILE = FIXTURES / "ADP007_fuse_conv_bn" / "cross_file_factories.py"


def test_lint_fast_holds_the_default_rules() -> None:
    """`enable = ["adopter_codemods.lint.fast"]` is the selection of `scan` without --rules: same findings, same fix."""
    import adopter_codemods.lint.fast as fast

    loaded = walk_module(fast)
    assert sorted(loaded) == sorted(r.name for r in default_rules()) and set(loaded) < set(walk_module(lint))
    source = EXAMPLE.read_text(encoding="utf-8")
    runner, violations = lint_source(source, list(loaded.values()))
    reported = sorted((v.message.split()[0], v.range.start.line) for v in violations)
    assert reported == sorted((f.code, f.line) for f in scan_source(source))
    assert runner.apply_replacements(violations).code == rewrite_source(source).code


def test_lint_follows_factories_of_other_files_from_the_linted_path() -> None:
    """Fixit hands the rule the file's path: layer factories in the package next to it are read (factory_types)."""
    runner = LintRunner(CROSS_FILE, CROSS_FILE.read_bytes())
    violations = list(runner.collect_violations([lint.FuseConvBN()], Config(path=CROSS_FILE)))
    assert len(violations) == len(rewrite_source(CROSS_FILE.read_text(encoding="utf-8"), ["ADP007"],
                                                 path=str(CROSS_FILE)).findings) == 5
    assert scan_source(CROSS_FILE.read_text(encoding="utf-8"), ["ADP007"]) == []  # no path, nothing followed


FIXIT_CLASSES = generate_lint_rule_test_cases([cls() for cls in RULE_CLASSES])
FIXIT_CASES = [
    pytest.param(case_class, name, id=f"{case_class.__name__}.{name}")
    for case_class in FIXIT_CLASSES
    for name in sorted(dir(case_class))
    if name.startswith("test_")
]


@pytest.mark.parametrize(("case_class", "name"), FIXIT_CASES)
def test_fixit_valid_invalid_cases(case_class: type, name: str) -> None:
    case_class(name).debug()  # Fixit's helper: no report on VALID; INVALID reported and fixed to the golden output


def test_every_rule_with_fixtures_has_fixit_cases() -> None:
    with_fixtures = {p.name.split("_", 1)[0] for p in FIXTURES.iterdir() if p.is_dir()}
    covered = {c.__name__ for c in FIXIT_CLASSES if any(name.startswith("test_") for name in dir(c))}
    assert {r.name for r in builtin_rules() if r.code in with_fixtures} <= covered


def test_reports_at_the_scan_positions() -> None:
    source = EXAMPLE.read_text(encoding="utf-8")
    _, violations = lint_source(source)
    reported = sorted((v.message.split()[0], v.range.start.line, v.range.start.column + 1) for v in violations)
    assert reported == sorted((f.code, f.line, f.col) for f in scan_source(source, ["all"]))
    # the whole-file fix rides on the first finding; the others point at it
    first = min(violations, key=lambda v: (v.range.start.line, v.message))
    assert [v for v in violations if v.autofixable] == [first]
    others = [v for v in violations if v is not first]
    # a match inside another rule's is no fix of its own: that one's rewrite replaces it
    inside = [v for v in others if "whose rewrite replaces it" in v.message]
    assert inside and all(f"(autofix: the fix of line {first.range.start.line})" in v.message for v in others if v not in inside)
    assert not lint._FILES  # per-file state is dropped once every rule has left the module


def test_one_fix_run_applies_every_enabled_rule() -> None:
    source = EXAMPLE.read_text(encoding="utf-8")
    runner, violations = lint_source(source)
    assert runner.apply_replacements(violations).code == rewrite_source(source, ["all"]).code
    rule = builtin_rules()[-1]
    single = [getattr(lint, rule.name)]
    runner, violations = lint_source(source, single)
    assert runner.apply_replacements(violations).code == rewrite_source(source, [rule.code]).code


def test_lint_without_diff_builds_no_fix() -> None:
    source = EXAMPLE.read_text(encoding="utf-8")
    with fixit_cli.lint.make_context("lint", ["model.py"]):  # as inside `fixit lint model.py`
        assert lint_without_diff()
        _, violations = lint_source(source)
        assert gc.isenabled()  # paused for Fixit's walk of the module only
    assert len(violations) == len(scan_source(source, ["all"])) > 0
    assert not any(v.autofixable for v in violations)
    assert all(
        v.message.endswith(" (fixable: fixit fix)") or v.message.endswith("whose rewrite replaces it")
        for v in violations
    )
    assert not lint._FILES


@pytest.mark.parametrize(
    ("command", "args"), [(fixit_cli.lint, ["--diff", "m.py"]), (fixit_cli.lint, ["-d"]), (fixit_cli.fix, ["-a"])]
)
def test_other_fixit_commands_keep_the_fix(command: click.Command, args: list[str]) -> None:
    with command.make_context(command.name, args):
        assert not lint_without_diff()
        _, violations = lint_source(EXAMPLE.read_text(encoding="utf-8"))
    assert sum(v.autofixable for v in violations) == 1


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["lint", "src"], True),
        (["--rules", "x", "-o", "vscode", "lint"], True),
        (["lint", "--diff", "src"], False),
        (["lint", "-d"], False),
        (["fix", "--automatic", "src"], False),
        (["upgrade", "src"], False),
        (["lsp"], False),
        ([], False),
        (["--version"], False),
    ],
)
def test_a_worker_reads_the_parent_command_line(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], expected: bool
) -> None:
    # a spawned worker: no click context, multiprocessing's parent process, the parent's sys.argv
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: object())
    monkeypatch.setattr(sys, "argv", [str(Path(fixit.__file__).with_name("__main__.py")), *argv])
    assert lint_without_diff() is expected
    monkeypatch.setattr(sys, "argv", [str(ROOT / "other_tool.py"), *argv])  # not Fixit's command line: no telling
    assert not lint_without_diff()


def test_no_telling_keeps_the_fix() -> None:
    assert not lint_without_diff()  # the API and the VALID/INVALID harness: no click context, no parent process
    with click.Context(click.Command("lint", params=[click.Option(["--diff"], is_flag=True)])) as ctx:
        ctx.params["diff"] = False
        assert not lint_without_diff()  # some other tool's `lint`


def test_collector_hold_resumes_once_and_hands_over() -> None:
    hold = CollectorHold()
    hold.begin(1)
    try:
        assert not gc.isenabled()
        hold.begin(2)  # module 1 never ended (an exception in Fixit's walk): module 2 takes the pause over
        hold.end(1)
        assert not gc.isenabled()
        hold.end(2)
        assert gc.isenabled()
        gc.disable()  # paused by someone else: neither resumed nor taken
        hold.begin(3)
        hold.end(3)
        assert not gc.isenabled()
    finally:
        gc.enable()


def _line_of(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def test_lint_ignore_silences_a_finding_and_the_whole_file_fix_leaves_it() -> None:
    source = EXAMPLE.read_text(encoding="utf-8")
    line = _line_of(source, "hidden_states = self.dropout(hidden_states)")
    lines = source.splitlines(keepends=True)
    lines.insert(line - 1, "        # lint-ignore: FuseDropoutLN\n")
    silenced = "".join(lines)
    runner, violations = lint_source(silenced)
    positions = {(v.rule_name, v.range.start.line) for v in violations}
    assert ("FuseDropoutLN", line + 1) not in positions
    assert len(violations) == len(scan_source(source, ["all"])) - 1
    assert sum(v.autofixable for v in violations) == 1
    fixed = runner.apply_replacements(violations).code
    assert fixed == rewrite_source(silenced, ["all"]).code and "# lint-ignore: FuseDropoutLN" in fixed
    assert "hidden_states = self.dropout(hidden_states)" in fixed


def test_lint_ignore_in_the_module_header_silences_the_rule_in_the_file() -> None:
    source = "# lint-ignore: FuseDropoutLN\n" + EXAMPLE.read_text(encoding="utf-8")
    runner, violations = lint_source(source)
    assert violations and "FuseDropoutLN" not in {v.rule_name for v in violations}
    assert sum(v.autofixable for v in violations) == 1
    assert runner.apply_replacements(violations).code == rewrite_source(source, ["all"]).code


def _first_positive_fixture() -> Path:
    return next(c for c in fixture_cases() if not is_negative(c) and expected_path(c).exists())


def test_fixit_cli_lint_fix_lint(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.fixit]\nroot = true\nenable = ["adopter_codemods.lint"]\ndisable = ["fixit.rules"]\n',
        encoding="utf-8",
    )
    src = tmp_path / "src"
    src.mkdir()
    fixture = _first_positive_fixture()
    shutil.copy(fixture, src / "fixture_model.py")
    shutil.copy(EXAMPLE, src / "example_model.py")
    originals = {p.name: p.read_text(encoding="utf-8") for p in src.iterdir()}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))

    def fixit(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fixit", *args], cwd=tmp_path, env=env, capture_output=True, text=True
        )

    linted = fixit("lint", "src")  # two files: Fixit's spawned workers lint them
    assert linted.returncode == 1, linted.stderr
    reported = sorted(
        (m.group(1), int(m.group(2)), int(m.group(3)) + 1, m.group(4))
        for m in re.finditer(r"^src/(\S+)@(\d+):(\d+) \w+: (ADP\d+) ", linted.stdout, re.M)
    )
    expected = sorted(
        (name, f.line, f.col, f.code) for name, text in originals.items() for f in scan_source(text, ["all"], path=name)
    )
    assert reported == expected and expected
    # `fixit lint` without --diff builds no fix: every finding says it is fixable, none carries an autofix
    fixable = sum(f.fixable for text in originals.values() for f in scan_source(text, ["all"]))
    assert linted.stdout.count("(fixable: fixit fix)") == fixable < len(expected)  # one inside another rule's match
    assert "(has autofix)" not in linted.stdout and "auto-fix" not in linted.stderr
    one = fixit("lint", "src/example_model.py")  # one file: linted in Fixit's own process
    example = scan_source(originals["example_model.py"], ["all"])
    assert one.stdout.count("(fixable: fixit fix)") == sum(f.fixable for f in example) > 0
    assert "(has autofix)" not in one.stdout
    script = Path(sys.executable).with_name("fixit")  # the console script: its workers re-run it as __mp_main__
    if script.exists():
        by_script = subprocess.run([str(script), "lint", "src"], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert by_script.stdout.count("(fixable: fixit fix)") == fixable, by_script.stderr
    diffed = fixit("lint", "--diff", "src")  # the diff needs the fix: built, one per file
    assert diffed.stdout.count("(has autofix)") == len(originals) and "(fixable" not in diffed.stdout
    assert "+import adopter_kernels" in diffed.stdout
    assert all((src / name).read_text(encoding="utf-8") == text for name, text in originals.items())
    fixed = fixit("fix", "--automatic", "src")
    assert fixed.returncode == 0, fixed.stderr
    for name, text in originals.items():
        assert (src / name).read_text(encoding="utf-8") == rewrite_source(text, ["all"]).code
    again = fixit("lint", "src")
    assert again.returncode == 0, again.stdout + again.stderr
