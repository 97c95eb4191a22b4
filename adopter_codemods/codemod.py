"""The LibCST codemod every rule command derives from: a thin adapter over the engine.

The structure is built once per file from ``context.filename`` (which base classes imported from other files are
resolved against; LibCST's metadata providers never see the path); the engine then matches, plans and rewrites.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import ClassVar, Optional, Sequence

import libcst as cst
from libcst.codemod import CodemodContext, SkipFile, VisitorBasedCodemodCommand

from .dsl import Rule, RuleSyntaxError
from .engine import rewrite_module, skips_for
from .provider import build_module_structure
from .rules import load_user_rules, select_rules


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
        structure = build_module_structure(tree, self.context.filename)
        outcome = rewrite_module(tree, self.rules, structure, path=self.context.filename)
        # After matching: classes are only walked (and found too complex) when some rule could match them.
        for skip in skips_for(structure, self.context.filename or "<stdin>"):
            self.warn(f"line {skip.line}: {skip.unit} not analysed: {skip.reason}")
        if not outcome.applied:
            raise SkipFile("no Adopter rule applies")
        return outcome.module
