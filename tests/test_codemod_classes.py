"""The codemod classes themselves, through LibCST's own test harness (``libcst.codemod.CodemodTest``): each rule's
codemod rewrites its first golden fixture to the expected output, skips a negative fixture, and skips its own
output (idempotent); ``AdoptFast`` applies the rules that are faster by default, ``AdoptAll`` every rule and
``ApplyRuleFiles`` only the rule files it is given."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from libcst.codemod import CodemodTest

import adopter_codemods
from adopter_codemods.api import rewrite_source
from adopter_codemods.dsl import Rule
from adopter_codemods.rules import builtin_rules, rule_module
from conftest import FIXTURES, ROOT

MODEL = '''\
import torch.nn.functional as F
from torch import nn


class SelfOutput(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.LayerNorm = nn.LayerNorm(hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dropout(hidden_states)
        hidden_states = self.LayerNorm(hidden_states + input_tensor)
        return F.softmax(hidden_states, dim=-1)
'''
# ADP005 and ADP004 on MODEL, as the two codemods write them (F, read by the softmax only, goes with it).
BOTH_REWRITTEN = '''\
from torch import nn
import adopter_kernels


class SelfOutput(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.LayerNorm = adopter_kernels.FusedDropoutAddLayerNorm(hidden, dropout=0.1)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.LayerNorm(hidden_states, input_tensor)
        return adopter_kernels.softmax(hidden_states, dim=-1)
'''
SOFTMAX_REWRITTEN = MODEL.replace("F.softmax(", "adopter_kernels.softmax(").replace(
    "from torch import nn\n", "from torch import nn\nimport adopter_kernels\n"
).replace("import torch.nn.functional as F\n", "")


@contextmanager
def user_rule_file(code: str) -> Iterator[str]:
    """A user rule file holding the built-in rule `code` under a code and name of its own (MY<n>, My<Name>)."""
    source = next((ROOT / "rules").glob(f"{code}_*.adopter")).read_text(encoding="utf-8")
    rule = next(r for r in builtin_rules() if r.code == code)
    renamed = source.replace(f"code {code}", f"code MY{code[3:]}").replace(f"rule {rule.name}", f"rule My{rule.name}")
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "my.adopter"
        path.write_text(renamed, encoding="utf-8")
        yield str(path)


def _cases(rule: Rule) -> tuple[Path, Path]:
    """The rule's first positive fixture and its first negative one."""
    directory = FIXTURES / f"{rule.code}_{rule_module(rule)}"
    inputs = sorted(p for p in directory.glob("*.py") if ".expected" not in p.suffixes)
    return next(p for p in inputs if not p.name.startswith("neg_")), next(p for p in inputs if p.name.startswith("neg_"))


def _rule_codemod_test(rule: Rule) -> type[CodemodTest]:
    positive, negative = _cases(rule)
    before = positive.read_text(encoding="utf-8")
    after = positive.with_name(positive.stem + ".expected.py").read_text(encoding="utf-8")

    class RuleCodemodTest(CodemodTest):
        TRANSFORM = getattr(adopter_codemods, rule.name)

        def test_rewrites_its_golden_fixture(self) -> None:
            self.assertCodemod(before, after)

        def test_skips_its_negative_fixture(self) -> None:
            source = negative.read_text(encoding="utf-8")
            self.assertCodemod(source, source, expected_skip=True)

        def test_skips_its_own_output(self) -> None:
            self.assertCodemod(after, after, expected_skip=True)

    RuleCodemodTest.__name__ = RuleCodemodTest.__qualname__ = f"Test{rule.name}"
    return RuleCodemodTest


for _rule in builtin_rules():
    globals()[f"Test{_rule.name}"] = _rule_codemod_test(_rule)


class TestRuleCodemodWithRuleFile(CodemodTest):
    TRANSFORM = adopter_codemods.FastSoftmax

    def test_only_its_rule_without_rule_file(self) -> None:
        self.assertCodemod(MODEL, SOFTMAX_REWRITTEN)

    def test_its_rule_plus_the_rule_file(self) -> None:
        with user_rule_file("ADP005") as rule_file:
            self.assertCodemod(MODEL, BOTH_REWRITTEN, rule_file=[rule_file])


class TestAdoptAll(CodemodTest):
    TRANSFORM = adopter_codemods.AdoptAll

    def test_applies_every_rule(self) -> None:
        self.assertCodemod(MODEL, BOTH_REWRITTEN)

    def test_idempotent(self) -> None:
        self.assertCodemod(BOTH_REWRITTEN, BOTH_REWRITTEN, expected_skip=True)


class TestAdoptFast(CodemodTest):
    TRANSFORM = adopter_codemods.AdoptFast
    EXAMPLE = (ROOT / "adopter_codemods" / "examples" / "bert_like.py").read_text(encoding="utf-8")

    def test_applies_the_default_rules(self) -> None:
        self.assertCodemod(self.EXAMPLE, rewrite_source(self.EXAMPLE).code)

    def test_leaves_the_rules_whose_kernels_are_not_faster(self) -> None:
        self.assertCodemod(MODEL, MODEL, expected_skip=True)  # ADP004 and ADP005 sites only

    def test_plus_the_rule_file(self) -> None:
        with user_rule_file("ADP004") as rule_file:
            self.assertCodemod(MODEL, SOFTMAX_REWRITTEN, rule_file=[rule_file])


class TestApplyRuleFiles(CodemodTest):
    TRANSFORM = adopter_codemods.ApplyRuleFiles

    def test_applies_only_the_rule_file(self) -> None:
        with user_rule_file("ADP004") as rule_file:
            self.assertCodemod(MODEL, SOFTMAX_REWRITTEN, rule_file=[rule_file])

    def test_requires_a_rule_file(self) -> None:
        with self.assertRaises(ValueError):
            self.assertCodemod(MODEL, MODEL)
