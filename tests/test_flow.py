"""The control-flow graph analysis (adopter_codemods/flow): no class is left out for its number of paths, values
read across joins are judged per edge, and the real classes that exceeded the old path limit are analysed."""

from __future__ import annotations

import importlib
from pathlib import Path

import libcst as cst
import pytest

from adopter_codemods.api import rewrite_source
from adopter_codemods.dsl import parse_rule
from adopter_codemods.engine import find_all, findings_for, skips_for
from adopter_codemods.matcher import find_matches
from adopter_codemods.provider import build_module_structure
from adopter_codemods.rules import select_rules
from conftest import FIXTURES
from generated_sources import branchy_class
from test_matcher_forked_paths import CLASS_HEAD, RULE


def test_a_class_with_2_to_the_40_paths_is_analysed() -> None:
    k = 40
    module = cst.parse_module(branchy_class(k))
    structure = build_module_structure(module)
    findings = findings_for(module, find_all(structure, select_rules(["ADP004", "ADP005"])), "m.py")
    assert skips_for(structure, "m.py") == []
    assert sorted((f.code, f.line) for f in findings if f.code == "ADP004") == [("ADP004", 13 + 3 * i) for i in range(k)]
    assert sorted(f.line for f in findings if f.code == "ADP005") == [14 + 3 * i for i in range(k)]
    (cls,) = structure.classes
    (graph,) = cls.graphs
    assert len(graph.events) < 20 * k  # each statement once, not once per path


PAIR = parse_rule(RULE)  # conv -> bn, as in the forked-path tests


def _pairs(body: str) -> list[str]:
    (cls,) = build_module_structure(cst.parse_module(CLASS_HEAD + body)).classes
    return [f.placement.plan for f in find_matches(PAIR, cls)]


def test_a_node_reading_a_join_of_another_value_is_refused() -> None:
    # On the path through the `if`, bn reads act's result: fusing conv into bn would change it.
    assert _pairs("        y = self.conv(x)\n        if flag:\n            y = self.act(flag)\n        return self.bn(y)\n") == []


def test_a_join_that_keeps_the_value_is_accepted() -> None:
    # The `if` only reads y: after the join y still holds conv's result on every path.
    body = "        y = self.conv(x)\n        if flag:\n            self.act(flag)\n        z = self.bn(y)\n        return z\n"
    assert _pairs(body) == ["block"]


def test_a_branch_that_may_skip_the_producer_is_refused() -> None:
    body = "        y = x\n        if flag:\n            y = self.conv(x)\n        z = self.bn(y)\n        return z\n"
    assert _pairs(body) == []


def test_one_call_rewritten_where_it_stands_may_read_a_join_of_other_values() -> None:
    """nanoGPT's sampling: `logits` changed in place under `if top_k is not None:`, so the softmax reads a join of two
    values. ADP004 rewrites that one call where it stands, passing its arguments as written: on every path it reads
    what the original read (it was refused: "`logits` holds another value"). Executed in
    fixtures/ADP004_fast_softmax/argument_changed_in_place_under_if.py."""
    fixture = cst.parse_module((FIXTURES / "ADP004_fast_softmax" / "argument_changed_in_place_under_if.py").read_text())
    # nanoGPT's GPT class alone: in the fixture a subclass defining forward runs it (and is found either way)
    alone = [
        s for s in fixture.body
        if isinstance(s, cst.SimpleStatementLine) or (isinstance(s, cst.ClassDef) and s.name.value == "GPT")
    ]
    code = rewrite_source(fixture.with_changes(body=alone).code, ["ADP004"]).code
    assert "probs = adopter_kernels.softmax(logits, dim=-1)" in code


def test_phi_gets_a_value_per_join() -> None:
    (cls,) = build_module_structure(
        cst.parse_module(CLASS_HEAD + "        if flag:\n            x = self.act(x)\n        return self.bn(x)\n")
    ).classes
    (graph,) = cls.graphs
    bn = next(n for n in graph.nodes if n.layer == "self.bn")
    act = next(n for n in graph.nodes if n.layer == "self.act")
    (read,) = bn.args
    assert read.vid in graph.phis and act.out in graph.phis[read.vid]


BIG_BIRD_SOFTMAX_LINES = [625, 679, 740, 813, 829]


def test_big_bird_block_sparse_softmax_sites_are_found() -> None:
    transformers = pytest.importorskip("transformers")
    if transformers.__version__ != "4.34.1":
        pytest.skip("line numbers of transformers 4.34.1")
    path = Path(transformers.__file__).parent / "models" / "big_bird" / "modeling_big_bird.py"
    module = cst.parse_module(path.read_text(encoding="utf-8"))
    structure = build_module_structure(module)
    findings = findings_for(module, find_all(structure, select_rules(["ADP004"])), str(path))
    lines = [f.line for f in findings if f.cls == "BigBirdBlockSparseAttention"]
    assert lines == BIG_BIRD_SOFTMAX_LINES
    assert skips_for(structure, str(path)) == []


def test_big_bird_block_sparse_rewrite_is_equivalent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The new sites, rewritten and executed: a tiny BigBird in block-sparse mode, float64, outputs and gradients in
    train and eval, the original state_dict loaded strictly (adopter_kernels/equivalence.py)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if transformers.__version__ != "4.34.1":
        pytest.skip("written against transformers 4.34.1")
    import adopter_kernels
    from adopter_kernels.equivalence import compare_models, default_dtype, load_source_as_module, seeded

    package = "transformers.models.big_bird"
    original = importlib.import_module(f"{package}.modeling_big_bird")
    result = rewrite_source(Path(original.__file__ or "").read_text(encoding="utf-8"), ["ADP004"])
    assert [f.line for f in result.findings if f.cls == "BigBirdBlockSparseAttention"] == BIG_BIRD_SOFTMAX_LINES
    rewritten = load_source_as_module(result.code, f"{package}.modeling_big_bird_adopted", package=package)
    calls: list[int] = []
    real_softmax = adopter_kernels.softmax

    def counting_softmax(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real_softmax(*args, **kwargs)

    monkeypatch.setattr(adopter_kernels, "softmax", counting_softmax)

    def build(module):  # type: ignore[no-untyped-def]
        config = module.BigBirdConfig(
            vocab_size=50, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16,
            max_position_embeddings=64, attention_type="block_sparse", block_size=2, num_random_blocks=1,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        )
        return module.BigBirdModel(config)

    with default_dtype(torch.float64):
        with seeded(0):
            original_model = build(original)
        with seeded(0):
            rewritten_model = build(rewritten)
        with seeded(1):
            # 16 tokens: more than the (5 + 2 * 1) * 2 a block-sparse layer needs before falling back to full attention
            inputs = {"input_ids": torch.randint(0, 50, (2, 16)), "attention_mask": torch.ones(2, 16, dtype=torch.long)}
            inputs["attention_mask"][1, 12:] = 0
        report = compare_models(original_model, rewritten_model, kwargs=inputs)
    report.raise_if_failed()
    assert len(calls) >= 5 * 2 * len(report.modes)  # five block-sparse softmax sites per layer, two layers
