"""The LibCST codemod every rule command derives from: a thin adapter over the engine.

``METADATA_DEPENDENCIES`` declares :class:`ModelStructureProvider`, so the structure is computed once per file by
LibCST's metadata machinery; the engine then matches, plans and rewrites.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import ClassVar, Optional, Sequence

import libcst as cst
from libcst.codemod import CodemodContext, SkipFile, VisitorBasedCodemodCommand

from .dsl import Rule
from .engine import rewrite_module, skips_for
from .provider import ModelStructureProvider
from .rules import load_rules, select_rules


class AdopterCodemod(VisitorBasedCodemodCommand):
    """Apply Adopter rules to each file. Subclasses set ``RULES`` (codes); empty means every built-in rule."""

    RULES: ClassVar[tuple[str, ...]] = ()
    INCLUDE_BUILTIN: ClassVar[bool] = True
    DESCRIPTION: str = "Apply Adopter rules."
    METADATA_DEPENDENCIES = (ModelStructureProvider,)

    def __init__(self, context: CodemodContext, rule_file: Optional[Sequence[str]] = None) -> None:
        super().__init__(context)
        files = [Path(p) for p in rule_file or ()]
        builtin = select_rules(list(self.RULES) or None) if self.INCLUDE_BUILTIN else []
        self.rules: list[Rule] = builtin + load_rules(files)

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.add_argument(
            "--rule-file",
            dest="rule_file",
            action="append",
            metavar="FILE.adopter",
            help="also apply the rule in this DSL file (repeatable)",
        )

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        structure = self.get_metadata(ModelStructureProvider, tree)
        outcome = rewrite_module(tree, self.rules, structure)
        # After matching: classes are only walked (and found too complex) when some rule could match them.
        for skip in skips_for(structure, self.context.filename or "<stdin>"):
            self.warn(f"line {skip.line}: {skip.unit} not analysed: {skip.reason}")
        if not outcome.applied:
            raise SkipFile("no Adopter rule applies")
        return outcome.module
