"""The LibCST codemods: one per built-in rule (:mod:`.builtin`, made from the rule files), ``AdoptFast`` (the
built-in rules whose kernels are faster by default, as ``rewrite`` without ``--rules``), ``AdoptAll`` (every
built-in rule) and ``ApplyRuleFiles`` (only ``--rule-file`` rules).
``python -m libcst.tool codemod -x adopter_codemods.FuseDropoutLN src/`` runs one.

With ``modules: ['adopter_codemods.commands']`` in ``.libcst.codemod.yaml``, LibCST also resolves
``fuse_dropout_ln.FuseDropoutLN`` (see :mod:`.builtin`) and — through the alias below — ``adopter_codemods.FuseDropoutLN``:
LibCST imports ``<configured module>.<name before the last dot>``, so ``adopter_codemods.commands.adopter_codemods``
must be importable, and it is the package itself.
"""

import sys

import adopter_codemods

from . import builtin  # noqa: F401  (registers the per-rule modules)

sys.modules[__name__ + ".adopter_codemods"] = adopter_codemods
