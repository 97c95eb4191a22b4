"""One codemod per rule (``python -m libcst.tool codemod -x adopter_codemods.FuseDropoutLN src/``).

With ``modules: ['adopter_codemods.commands']`` in ``.libcst.codemod.yaml``, LibCST also resolves
``fuse_dropout_ln.FuseDropoutLN`` and — through the alias below — ``adopter_codemods.FuseDropoutLN``:
LibCST imports ``<configured module>.<name before the last dot>``, so ``adopter_codemods.commands.adopter_codemods``
must be importable, and it is the package itself.
"""

import sys

import adopter_codemods

sys.modules[__name__ + ".adopter_codemods"] = adopter_codemods
