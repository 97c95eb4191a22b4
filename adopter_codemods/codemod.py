"""The LibCST codemod every rule command derives from: a thin adapter over the engine.

The engine builds the structure once per file from ``context.filename``, which base classes imported from other
files are resolved against (a LibCST metadata provider never sees the path), then matches, plans and rewrites.
:func:`rule_codemod` makes the codemod class of a built-in rule from its rule files
(``adopter_codemods.commands.builtin``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import ClassVar, Optional, Sequence

import libcst as cst
from libcst.codemod import CodemodContext, SkipFile, VisitorBasedCodemodCommand

from .dsl import Rule, RuleSyntaxError
from .engine import GUARDED_NOTE, analyse, findings_for
from .rules import load_user_rules, rule_doc, rule_targets, select_rules


def _checked_rule_file(path: str) -> str:
    """Parse a rule file while LibCST's tool reads the arguments: a malformed one is then one located message and
    exit 2, instead of a traceback for every file (the codemod is created per file)."""
    try:
        load_user_rules([Path(path)])
    except RuleSyntaxError as exc:
        raise argparse.ArgumentTypeError(f"malformed rule file: {exc}") from None
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read rule file {path}: {exc.strerror}") from None
    return path


class AdopterCodemod(VisitorBasedCodemodCommand):
    """Apply Adopter rules to each file, plus the rules of any ``--rule-file``. Subclasses set ``RULES`` (codes);
    ``("all",)`` is every built-in rule, ``()`` none (only the rule files, which are then required). The selection
    is :func:`~adopter_codemods.rules.select_rules`'s, the same as ``rewrite --rules ... --rule-file ...``."""

    RULES: ClassVar[tuple[str, ...]] = ("all",)
    DESCRIPTION: str = "Apply Adopter rules."

    def __init__(self, context: CodemodContext, rule_file: Optional[Sequence[str]] = None) -> None:
        super().__init__(context)
        files = [Path(p) for p in rule_file or ()]
        if not self.RULES and not files:
            raise ValueError(f"{type(self).__name__} needs at least one --rule-file")
        self.rules: list[Rule] = select_rules(list(self.RULES), files)

    @classmethod
    def add_args(cls, arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.add_argument(
            "--rule-file",
            dest="rule_file",
            action="append",
            required=not cls.RULES,
            type=_checked_rule_file,
            metavar="FILE.adopter",
            help="also apply the rule in this DSL file (repeatable)" if cls.RULES else "the DSL file to apply (repeatable)",
        )

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        path = self.context.filename or "<stdin>"
        analysis = analyse(tree, self.rules, path)
        outcome = analysis.rewrite()
        for skip in analysis.skips():
            self.warn(f"line {skip.line}: {skip.unit} not analysed: {skip.reason}")
        if not outcome.applied:
            raise SkipFile("no Adopter rule applies")
        guarded = [f for f in outcome.applied if f.match.certainty == "guarded"]
        for finding in findings_for(tree, guarded, path):
            self.warn(f"line {finding.line}: {finding.code} in {finding.cls}: {GUARDED_NOTE}")
        return outcome.module


def rule_codemod(rule: Rule, module: str) -> type[AdopterCodemod]:
    """The codemod class of one rule, named after it, defined as ``module.<rule name>``: its docstring is the rule's
    documentation (``rules/<CODE>_<name>.md``), its description the rule's summary and kernel targets."""
    targets = ", ".join(rule_targets(rule))
    attributes = {
        "__doc__": rule_doc(rule) or f"{rule.code} {rule.name}: {rule.summary}",
        "__module__": module,
        "__qualname__": rule.name,
        "DESCRIPTION": f"{rule.code}: {rule.summary}" + (f" (into {targets})." if targets else "."),
        "RULES": (rule.code,),
    }
    return type(rule.name, (AdopterCodemod,), attributes)
