"""ApplyRuleFiles — apply only the rules in user-written DSL files (``--rule-file my_rule.adopter``).

Lets a user add a kernel rule without writing Python: the file is parsed with the same DSL as the built-in rules.
"""

from .. import codemod


class ApplyRuleFiles(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "Apply the rules of the given --rule-file DSL files only."
    INCLUDE_BUILTIN = False
