"""The codemod of every built-in rule, made from its rule files (``rules/<CODE>_<module>.adopter`` and the ``.md``
beside it) by :func:`adopter_codemods.codemod.rule_codemod`: ``FuseDropoutLN`` here is the codemod of ADP005.

Each class is also reachable as ``adopter_codemods.commands.<module>.<Name>`` (``fuse_dropout_ln.FuseDropoutLN``),
the name LibCST resolves under ``modules: ['adopter_codemods.commands']`` of ``.libcst.codemod.yaml``: a module of
that name holding the class is registered for each rule.
"""

from __future__ import annotations

import sys
import types

from .. import codemod  # the module, not its base class: `libcst.tool list` would list that here
from ..rules import builtin_rules, rule_module

_PACKAGE = __name__.rpartition(".")[0]

CODEMODS: dict[str, type[codemod.AdopterCodemod]] = {}  # rule name -> its codemod class, in rule-code order
for _rule in builtin_rules():
    _codemod = CODEMODS[_rule.name] = globals()[_rule.name] = codemod.rule_codemod(_rule, __name__)
    _alias = types.ModuleType(f"{_PACKAGE}.{rule_module(_rule)}", _codemod.__doc__)
    setattr(_alias, _rule.name, _codemod)
    sys.modules[_alias.__name__] = _alias

__all__ = list(CODEMODS)
