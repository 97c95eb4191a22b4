"""ApplyRuleFiles — apply only the rules in user-written DSL files (``--rule-file my_rule.adopter``, required).

Lets a user add a kernel rule without writing Python: the file is parsed with the same DSL as the built-in rules.
The same as ``python -m adopter_codemods rewrite --rule-file my_rule.adopter``; to run built-in rules as well, use
``AdoptAll --rule-file ...`` (every built-in) or a rule's own codemod, e.g. ``FuseDropoutLN --rule-file ...``.
"""

from .. import codemod


class ApplyRuleFiles(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "Apply the rules of the given --rule-file DSL files only (at least one is required)."
    RULES = ()
