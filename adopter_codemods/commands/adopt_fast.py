"""AdoptFast — the built-in rules whose kernels take a fast path somewhere by default (``rules/*.adopter`` whose
``fast`` header is not ``"none"``), in one pass over one parse; idempotent.

The same selection as ``python -m adopter_codemods rewrite`` without ``--rules``: the other rules rewrite to
kernels that run the original computation unless ``ADOPTER_KERNELS_BACKEND`` forces a backend, so a diff with no
speed-up. ``AdoptAll`` applies those too.
"""

from .. import codemod
from ..rules import FAST


class AdoptFast(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "Apply the built-in Adopter rules whose kernels are faster by default, plus any --rule-file."
    RULES = (FAST,)
