"""adopter_codemods: bring optimized deep-learning kernels into PyTorch model source code (Adopter, ISSTA 2024).

The codemod classes are importable from the package root (``adopter_codemods.FuseDropoutLN``) for
``python -m libcst.tool codemod -x adopter_codemods.<Name>``; they load lazily so ``import adopter_codemods`` stays
cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# The codemods not made from a rule file, and their modules under adopter_codemods.commands; every built-in rule's
# codemod comes from adopter_codemods.commands.builtin, made from its rule files (CONTRIBUTING.md, "Adding a rule").
_FRONT_END_CODEMODS: dict[str, str] = {
    "AdoptFast": "adopt_fast",
    "AdoptAll": "adopt_all",
    "ApplyRuleFiles": "apply_rule_files",
}


def codemod_names() -> list[str]:
    """Every codemod class importable from the package root: one per built-in rule, then AdoptFast, AdoptAll and
    ApplyRuleFiles."""
    from .rules import builtin_rules

    return [r.name for r in builtin_rules()] + list(_FRONT_END_CODEMODS)


def __getattr__(name: str) -> Any:
    # Codemod classes are CamelCase (a rule's `rule <Name>` header); anything else, e.g. a submodule looked up by
    # `from adopter_codemods import cli` before it is imported, must not import the codemods.
    if name in _FRONT_END_CODEMODS:
        return getattr(importlib.import_module(f"adopter_codemods.commands.{_FRONT_END_CODEMODS[name]}"), name)
    if name[:1].isupper():
        codemod = importlib.import_module("adopter_codemods.commands.builtin").CODEMODS.get(name)
        if codemod is not None:
            return codemod
    raise AttributeError(f"module 'adopter_codemods' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *codemod_names()])
