"""The rule registry: the built-in rules parsed from ``rules/*.adopter``, plus user rule files."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Iterable, Optional, Sequence

from . import guards
from .dsl import Rule, RuleSyntaxError, load_rule_file


def rules_dir() -> Path:
    """Installed wheels carry the rules inside the package; a source checkout keeps them at the top level."""
    here = Path(__file__).resolve().parent
    packaged = here / "rules"
    return packaged if packaged.is_dir() else here.parent / "rules"


def load_rules(paths: Iterable[Path]) -> list[Rule]:
    """Parse rule files; unknown guards are reported like syntax errors (file, line)."""
    # Guards live in the built-in rule modules; importing them registers the names.
    from . import rule_guards  # noqa: F401

    rules = []
    for path in paths:
        rule = load_rule_file(path)
        for name in rule.guards:
            try:
                guards.get(name)
            except KeyError as exc:
                line = _line_of(path, f"guard {name}")
                raise RuleSyntaxError(str(path), line, 1, str(exc.args[0])) from None
        rules.append(rule)
    return rules


def _line_of(path: Path, text: str) -> int:
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if text in line:
            return i
    return 1


@functools.lru_cache(maxsize=None)
def builtin_rules() -> tuple[Rule, ...]:
    rules = load_rules(sorted(rules_dir().glob("*.adopter")))
    return tuple(sorted(rules, key=lambda r: r.code))


def select_rules(keys: Optional[Sequence[str]] = None, extra_files: Sequence[Path] = ()) -> list[Rule]:
    """Built-in rules selected by code (``ADP005``) or codemod name (``FuseDropoutLN``), plus user rule files.

    Raises KeyError naming the unknown keys and the known ones.
    """
    rules = list(builtin_rules())
    chosen = rules
    if keys:
        index = {r.code.lower(): r for r in rules} | {r.name.lower(): r for r in rules}
        unknown = [k for k in keys if k.strip().lower() not in index]
        if unknown:
            known = ", ".join(f"{r.code} ({r.name})" for r in rules)
            raise KeyError(f"unknown rule(s) {', '.join(unknown)}; known rules: {known}")
        chosen = []
        for k in keys:
            rule = index[k.strip().lower()]
            if rule not in chosen:
                chosen.append(rule)
    return chosen + load_rules(extra_files)
