"""The Fixit rules of the built-in rules whose kernels take a fast path somewhere by default: the selection of
``python -m adopter_codemods scan`` without ``--rules``. Enable them with
``[tool.fixit] enable = ["adopter_codemods.lint.fast"]``; ``adopter_codemods.lint`` enables every rule, those whose
kernels run the original computation by default too.

The classes are those of :mod:`adopter_codemods.lint` (one state per file, one fix for all enabled rules).
"""

from __future__ import annotations

import adopter_codemods.lint as _lint  # the rule classes are made there

from ..rules import default_rules

for _rule in default_rules():
    globals()[_rule.name] = getattr(_lint, _rule.name)

__all__ = [r.name for r in default_rules()]
