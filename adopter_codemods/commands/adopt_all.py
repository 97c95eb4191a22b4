"""AdoptAll — every built-in rule (ADP001–ADP010) in one pass over one parse; idempotent.

Rewrites that touch the same statements are applied in successive rounds on the rewritten tree, so the result is
the same as running the rules one after another; running it twice changes nothing the second time.
"""

from .. import codemod


class AdoptAll(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "Apply every Adopter rule (ADP001-ADP010), plus any --rule-file."
