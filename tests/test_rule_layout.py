"""Each built-in rule has one home, ``rules/<CODE>_<module>.adopter`` and the ``.md`` documenting it; everything
else is derived from them or must agree with them: codemod classes, Fixit rules, guards, runtime kernels,
fixtures and the rule tables of docs/DESIGN.md and the README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from libcst.codemod import CodemodCommand

import adopter_codemods
import adopter_codemods.lint as lint
from adopter_codemods import guards
from adopter_codemods.commands import builtin
from adopter_codemods.dsl import Rule
from adopter_codemods.rules import builtin_rules, doc_sections, rule_doc, rule_doc_path, rule_module, rule_targets
from conftest import FIXTURES, ROOT

RULES = builtin_rules()
SECTIONS = ["", "What", "Why", "Example", "Fix safety", "Limitations", "Performance"]  # the documentation's order


def _ids(rule: Rule) -> str:
    return rule.code


def _table(path: Path) -> dict[str, str]:
    """``code -> codemod`` of the rule table rows (``| ADP005 | FuseDropoutLN | ...``) of a Markdown file."""
    rows = re.findall(r"^\| (ADP\d{3}) \| (\w+) \|", path.read_text(encoding="utf-8"), flags=re.M)
    assert len(rows) == len(dict(rows)), f"{path.name}: a code listed twice"
    return dict(rows)


def test_rules_directory_holds_pattern_and_documentation_pairs() -> None:
    patterns = {p.stem for p in (ROOT / "rules").glob("*.adopter")}
    docs = {p.stem for p in (ROOT / "rules").glob("*.md")}
    assert patterns == docs
    assert sorted(patterns) == sorted(Path(r.path).stem for r in RULES)
    assert sorted(r.code for r in RULES) == [r.code for r in RULES]  # codes unique, registry in code order
    assert len({r.name for r in RULES}) == len(RULES)


@pytest.mark.parametrize("rule", RULES, ids=_ids)
def test_file_name_spells_code_and_name(rule: Rule) -> None:
    assert Path(rule.path).name == f"{rule.code}_{rule_module(rule)}.adopter"
    assert re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)*", rule_module(rule))
    assert rule_module(rule).replace("_", "") == rule.name.lower()


@pytest.mark.parametrize("rule", RULES, ids=_ids)
def test_documentation_has_every_section(rule: Rule) -> None:
    text = rule_doc_path(rule).read_text(encoding="utf-8")
    assert text.startswith(f"# {rule.code} {rule.name} — ")
    doc = rule_doc(rule)
    assert doc is not None
    assert [title for title, _ in doc_sections(doc)] == SECTIONS
    assert "``" not in text and not re.search(r"::$", text, flags=re.M)  # Markdown, not reStructuredText


@pytest.mark.parametrize("rule", RULES, ids=_ids)
def test_codemod_is_derived_from_the_rule(rule: Rule) -> None:
    codemod = getattr(adopter_codemods, rule.name)
    assert isinstance(codemod, type) and issubclass(codemod, CodemodCommand)
    assert codemod.RULES == (rule.code,)
    assert codemod.__doc__ == rule_doc(rule)
    assert codemod.DESCRIPTION.startswith(f"{rule.code}: {rule.summary}")
    # The name `.libcst.codemod.yaml` resolves (`modules: ['adopter_codemods.commands']`), and the pickled name.
    alias = __import__(f"adopter_codemods.commands.{rule_module(rule)}", fromlist=[rule.name])
    assert getattr(alias, rule.name) is codemod
    assert getattr(__import__(codemod.__module__, fromlist=[rule.name]), codemod.__qualname__) is codemod


def test_codemod_names_are_the_rules_and_the_front_ends() -> None:
    names = [r.name for r in RULES]
    assert adopter_codemods.codemod_names() == [*names, "AdoptFast", "AdoptAll", "ApplyRuleFiles"]
    assert list(builtin.CODEMODS) == names
    assert set(adopter_codemods.codemod_names()) <= set(dir(adopter_codemods))
    with pytest.raises(AttributeError):
        adopter_codemods.NoSuchCodemod  # noqa: B018


@pytest.mark.parametrize("rule", RULES, ids=_ids)
def test_fixit_rule_is_derived_from_the_rule(rule: Rule) -> None:
    fixit_rule = getattr(lint, rule.name)
    assert fixit_rule.RULE is rule
    assert fixit_rule.__doc__ == rule_doc(rule)


def test_every_guard_is_registered_and_used() -> None:
    named = {g for r in RULES for v in (r, *r.alternatives) for g in v.guards}
    assert named == set(guards.names())  # an unregistered name fails loading; an unused guard is dead code


@pytest.mark.parametrize("rule", RULES, ids=_ids)
def test_kernel_targets_exist_and_are_exported(rule: Rule) -> None:
    adopter_kernels = pytest.importorskip("adopter_kernels")
    targets = rule_targets(rule)
    assert targets
    for target in targets:
        package, _, name = target.rpartition(".")
        assert package == "adopter_kernels", target
        assert callable(getattr(adopter_kernels, name, None)), target
        assert name in adopter_kernels.__all__, target


@pytest.mark.parametrize("rule", RULES, ids=_ids)
def test_fixtures_directory_has_positive_and_negative_cases(rule: Rule) -> None:
    cases = [p for p in (FIXTURES / f"{rule.code}_{rule_module(rule)}").glob("*.py") if ".expected" not in p.suffixes]
    positive = [p for p in cases if not p.name.startswith("neg_")]
    assert positive and len(positive) < len(cases)
    assert all(p.with_name(p.stem + ".expected.py").exists() for p in positive)


def test_no_fixtures_without_a_rule() -> None:
    assert sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()) == [f"{r.code}_{rule_module(r)}" for r in RULES]


@pytest.mark.parametrize("page", ["docs/DESIGN.md", "README.md"])
def test_rule_tables_list_every_rule(page: str) -> None:
    assert _table(ROOT / page) == {r.code: r.name for r in RULES}
