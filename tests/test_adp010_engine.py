"""The engine extensions ADP010 brought, each on its own: optional `?` pattern nodes, tensor-method DSL nodes,
simple-test `if`s holding tensor ops walked as separate paths, and the `fallback original` plan; plus ADP010's
fixtures: every refusal is refused for the reason its name gives, and every positive really runs SDPA."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from adopter_codemods.api import refused_sites, rewrite_source
from adopter_codemods.dsl import RuleSyntaxError, parse_rule
from adopter_codemods.engine import find_all, rewrite_module
from adopter_codemods.provider import build_module_structure
from conftest import FIXTURES, expected_path

OPTIONAL = parse_rule(
    """\
rule AddScaleRelu
code ADP906
forward:
    $a + $b -> $c;
    ?$c * $s -> $d;
    torch.relu($d) -> $e
    =>
    kernels.add_relu($a, $b, scale=$s) -> $e
"""
)


def _module(body: str, imports: str = "import torch\nfrom torch import nn\n") -> str:
    return imports + "\n\nclass M(nn.Module):\n" + textwrap.indent(textwrap.dedent(body), "    ")


def _rewrite(source: str, rule=OPTIONAL) -> tuple[str, int]:  # type: ignore[no-untyped-def]
    module = cst.parse_module(source)
    found = find_all(build_module_structure(module), [rule])
    return rewrite_module(module, [rule]).module.code, len(found)


def test_optional_node_present_binds_its_variables() -> None:
    code, n = _rewrite(_module("def forward(self, x, y):\n    h = x + y\n    h = h * 0.5\n    return torch.relu(h)\n"))
    assert n == 1 and "return kernels.add_relu(x, y, scale=0.5)" in code


def test_absent_optional_node_passes_through_and_its_keyword_is_left_out() -> None:
    code, n = _rewrite(_module("def forward(self, x, y):\n    h = x + y\n    return torch.relu(h)\n"))
    assert n == 1 and "return kernels.add_relu(x, y)" in code


def test_optional_node_does_not_skip_a_present_step() -> None:
    """Skipping is only data flow: a multiply by something else between still breaks the chain."""
    _, n = _rewrite(_module("def forward(self, x, y):\n    h = x + y\n    h = h - 1.0\n    return torch.relu(h)\n"))
    assert n == 0


@pytest.mark.parametrize(
    "text, message",
    [
        ("?* ;\n", "'?' marks a node"),
        ("?$x * $y -> ($a, $b);\n", "passes a $variable through"),
    ],
)
def test_optional_syntax_errors(text: str, message: str) -> None:
    rule = f"rule R\ncode ADP907\nforward:\n    {text}    torch.relu($a) -> $e\n    =>\n    k.f($e) -> $e\n"
    with pytest.raises(RuleSyntaxError, match=message.replace("$", r"\$").replace("(", r"\(")):
        parse_rule(rule)


def test_target_positional_bound_only_by_an_optional_node_is_an_error() -> None:
    with pytest.raises(RuleSyntaxError, match="pass it by keyword"):
        parse_rule("rule R\ncode ADP908\nforward:\n    $a + $b -> $c;\n    ?$c * $s -> $d;\n    torch.relu($d) -> $e\n"
                   "    =>\n    k.f($a, $s) -> $e\n")


def test_fallback_header_value() -> None:
    with pytest.raises(RuleSyntaxError, match="fallback"):
        parse_rule("rule R\ncode ADP909\nfallback fused\nforward:\n    torch.relu($a) -> $e\n    =>\n    k.f($a) -> $e\n")


def test_tensor_methods_are_nodes_with_the_receiver_first() -> None:
    source = _module(
        """\
        def forward(self, s, m, k):
            t = k.transpose(-2, -1)
            u = torch.transpose(k, 0, 1)
            s = s.masked_fill(m, 0.0).softmax(dim=-1)
            return s.view(2, 3)
        """
    )
    structure = build_module_structure(cst.parse_module(source))
    (graph,) = structure.classes[0].graphs
    (path,) = graph.paths()
    nodes = [(n.qualname, [a.text for a in n.args], [k for k, _ in n.kwargs]) for n in path.nodes]
    assert nodes[:3] == [
        ("torch.Tensor.transpose", ["k", "-2", "-1"], []),
        ("torch.transpose", ["k", "0", "1"], []),
        ("torch.Tensor.masked_fill", ["s", "m", "0.0"], []),
    ]
    softmax = path.nodes[3]
    assert softmax.qualname == "torch.Tensor.softmax" and softmax.args[0].vid == path.nodes[2].out  # chained
    assert len(path.nodes) == 4  # `.view` is no node


def test_only_call_free_test_ifs_with_tensor_ops_split_paths() -> None:
    source = _module(
        """\
        def forward(self, s, mask, flag):
            if mask is not None:
                s = s + mask
            if flag:
                n = 1
            if self.training:
                s = s * 2
            if self.scaled():
                s = s * 3
            return torch.relu(s)
        """
    )
    (cls,) = build_module_structure(cst.parse_module(source)).classes
    (graph,) = cls.graphs
    # `if flag:` has no op and `self.scaled()` is a call: both folded; the `self.training` flag splits, as the mask
    # test does (minGPT's `if layer_past is None:` / a `self.causal` flag around the causal mask, ADP010).
    assert len(graph.paths()) == 4


ADP010 = FIXTURES / "ADP010_fuse_attention_core"

# Each refusal, and the edit that turns it into code the rule accepts: the refusal is for that reason only.
REFUSALS = {
    "neg_property_scale_changed_between.py": ("        self.tick()\n", ""),
    "neg_key_changed_by_a_closure.py": ("        reset()\n", ""),
    "neg_cache_object_reset_between.py": ("            past.reset()\n", "            pass\n"),
    "neg_mask_reads_the_scores.py": ("mask.to(s.dtype)", "mask"),
    "neg_cache_parameter_changed_in_place.py": ("        cache.zero_()\n", ""),
    "neg_dropout_before_continue.py": ("            if warmup and i == 0:\n                continue\n", ""),
    "neg_condition_reassigned.py": ("        output_attentions = output_attentions or not self.training\n", ""),
    "neg_condition_with_call.py": ("self.use_head_mask()", "head_mask is not None"),
    "neg_condition_attribute_stored.py": ("        self.save_attention = not self.training\n", ""),
    "neg_mask_flag_set_in_forward.py": ("        self.causal = n > 1\n", ""),
    "neg_mask_rebound_in_between.py": ("(m := m.transpose(-2, -1))", "m.transpose(-2, -1)"),
    "neg_test_reads_a_global_or_closure_name.py": (
        '        if CAUSAL:\n            att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))\n'
        "        toggle()\n",
        '        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))\n',
    ),
    "neg_exists_not_a_none_test.py": (" and val.numel() > 0", ""),
    # (the other class stays refused: its flag flips in place)
    "neg_fallback_test_changed_in_place_before_its_if.py": ("        g.add_(1)\n", ""),
    "neg_branch_scores_read_after.py": ("        print(dots.shape)\n", ""),
    "neg_absorbed_mask_calls_a_helper.py": ("~self.expand(attn_mask),", "~attn_mask.bool(),"),
    "neg_absorbed_mask_reads_another_name.py": ("~(attn_mask & keep),", "~attn_mask,"),
    "neg_fill_min_of_other_tensor.py": ("ref.dtype", "scores.dtype"),
    "neg_fill_unknown_value.py": ("-10000.0", "float('-inf')"),
    "neg_fill_value_read_again.py": ("return out.clamp(min=mask_value)", "return out"),
    "neg_retested_mask_from_helper.py": ("= key_padding(mask)", "= mask[:, None, None, :]"),
    "neg_helper_does_more.py": ("        self.bias_reads += 1\n", ""),
    "neg_mixed_matmul_spellings.py": ("torch.bmm", "torch.matmul"),
    # a reshape copies where a view cannot be: the rewrite runs on either layout
    "neg_output_view_merges_dims.py": ("return out.view(b, h * n, d)", "return out.reshape(b, h * n, d)"),
    "neg_probs_returned.py": ("return context, probs", "return context"),
    "neg_probs_stored.py": ("        self.attention_map = probs\n", ""),
    "neg_probs_times_head_mask.py": ("        probs = probs * head_mask\n", ""),
    "neg_region_if_with_else.py": ("        else:\n            probs = probs * 2.0\n", ""),
    "neg_scale_call_with_optional_mask.py": ("self.scale.exp()", "self.scale"),
    "neg_scale_local_of_helper.py": ("        d = self.head_dim\n        return d ** -0.5", "        return self.head_dim ** -0.5"),
    "neg_scores_reused.py": (", scores\n", "\n"),
    "neg_scores_read_by_a_closure.py": ("peek = lambda: s.amax()", "peek = lambda: q.amax()"),
    "neg_line_between_changes_what_the_scores_read.py": (
        "self.key_stats(k).mean(dim=2)", "self.key_stats(x.view(B_, N, self.num_heads, -1)).mean(dim=1)"
    ),
    "neg_buffer_held_by_a_layer_called_between.py": (
        "self.stats = Stats(self.temp, dim)", "self.stats = Stats(torch.ones(heads, 1, 1), dim)"
    ),
    "neg_line_between_changes_the_key_through_self.py": ("z = self.cache[-1].mul_(2.0)", "z = self.cache[-1] * 2.0"),
    "neg_helper_also_called_through_the_class.py": ("SelfThenMemory.core(self, a,", "self.core(a,"),
    "neg_helper_handed_to_checkpoint_beside_a_call.py": (
        "cp.checkpoint(self.core, x, memory, memory, use_reentrant=False)", "self.core(x, memory, memory)"
    ),
    "neg_helper_call_passes_one_tensor_twice.py": ("self.attend(self.q(x), m, m)", "self.attend(self.q(x), self.k(memory), m)"),
    "neg_softmax_other_dim.py": ("dim=2", "dim=-1"),
    "neg_softmax_module_other_dim.py": ("nn.Softmax(dim=1)", "nn.Softmax(dim=-1)"),
    "neg_softmax_module_without_dim.py": ("nn.Softmax()", "nn.Softmax(dim=-1)"),
    "neg_sequential_dropout_without_softmax.py": ("nn.Sequential(nn.Dropout(dropout))", "nn.Dropout(dropout)"),
    "neg_unknown_bias_moved_past_a_statement.py": ("        self.calls += 1\n", ""),
    "neg_softmax_upcast.py": (", dtype=torch.float32).to(q.dtype)", ")"),
    "neg_einsum_equation_not_literal.py": ("self.score_equation, q, k", '"b h i d, b h j d -> b h i j", q, k'),
    "neg_einsum_five_dims.py": ("B G H ", "B H "),
    "neg_einops_axis_names.py": ("batch heads ", "b h "),
    "neg_einsum_key_shared_across_heads.py": ("b j d", "b h j d"),
    "neg_einsum_fstring_with_placeholder.py": (
        'f"{self.batch_axes} i d, {self.batch_axes} j d -> {self.batch_axes} i j"', 'f"b h i d, b h j d -> b h i j"'
    ),
    "neg_random_scale_moved_past_a_draw.py": (
        "        attn = (q @ k) / (torch.rand(1) + 1)\n        noise = torch.randn_like(v)\n",
        "        noise = torch.randn_like(v)\n        attn = (q @ k) / (torch.rand(1) + 1)\n",
    ),
}


def test_every_refusal_is_listed() -> None:
    assert sorted(p.name for p in ADP010.glob("neg_*.py")) == sorted(REFUSALS)


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusal_is_for_its_reason(name: str) -> None:
    source = (ADP010 / name).read_text(encoding="utf-8")
    old, new = REFUSALS[name]
    assert old in source
    assert not rewrite_source(source, ["ADP010"]).findings
    assert len(rewrite_source(source.replace(old, new), ["ADP010"]).findings) == 1


POSITIVE = sorted(p for p in ADP010.glob("*.py") if not p.name.startswith("neg_") and not p.name.endswith(".expected.py"))
SDPA_CALLS = {  # per forward in eval; fewer than the calls where the fallback arm or the reference path runs
    "bert_mask_under_if.py": 1,  # calls: a fully padded row (reference path), no mask, head mask (as written)
    "bert_relative_position_fallback.py": 2,  # self- and cross-attention; the other four calls run as written
    "probabilities_saved_under_flag.py": 1,  # the saving attention runs as written
    "bmm_functional_dropout.py": 1,
    "cached_bias_helper.py": 1,
    "exists_masked_fill.py": 4,  # both classes, with and without their masks
    "exists_mask_in_else_branch.py": 2,
    "mask_under_if_only.py": 2,
    "mask_prepared_under_if.py": 8,  # four classes, with and without their masks
    "nanogpt_block.py": 1,
    "padding_masked_fill_min.py": 1,  # the second call masks every key: reference path
    "relative_position_bias.py": 1,
    "softmax_module_from_parameter.py": 1,  # the second block's softmax is another module: called
    "softmax_module_built_and_called.py": 1,  # a fully padded row (reference path), no mask, probabilities asked
    "softmax_module_used_elsewhere.py": 1,
    "timm_attention.py": 1,
    "vit_self_attention.py": 1,  # the second call passes a head mask and asks for the probabilities
    "vit_pytorch_softmax_module.py": 1,
    "softmax_dropout_sequential.py": 1,
    "module_then_functional_dropout.py": 1,  # in eval neither dropout is active
    "vit_pytorch_einsum.py": 1,
    "einsum_functional_softmax.py": 1,
    "einsum_fstring_equations.py": 1,
    "einops_einsum.py": 2,
    "metadata_scale_with_optional_mask.py": 1,
    "function_optional_mask.py": 1,  # a module-level function
    "optional_masked_fill_inf.py": 1,
    "function_probs_returned_on_request.py": 1,  # the call asking for the probabilities runs the original
    "output_changed_in_place.py": 1,
    "mask_under_flag_test.py": 2,
    "later_mask_with_method_call.py": 1,
    "absorbed_mask_with_tensor_methods.py": 2,  # the call with the mask and the one without
    "mask_under_self_flag.py": 2,  # the causal layer and the bidirectional one
    "inplace_fill_under_if.py": 2,  # with and without the mask
    "mask_named_under_test.py": 4,  # causal and not; padded and not
    "mask_added_in_place.py": 1,  # without the mask: open_clip's causal mask of -inf runs the reference path
    "scale_and_mask_in_place.py": 1,  # without padding: the bias and the padding fill together run the reference
    "scale_under_flag_test.py": 2,  # one fused call per arm of the flag
    "flag_set_by_an_init_helper.py": 2,  # with the bias table and without
    "fill_value_under_import_alias.py": 2,  # with the mask and without
    "scale_from_math_in_a_function.py": 2,  # with the bias and without
    "windowed_mask_under_if.py": 1,  # the unshifted call; the shifted one runs as written
    "window_attention_softmax_in_both_arms.py": 1,  # likewise
    "mask_under_if_in_a_helper.py": 2,  # the causal layer and the bidirectional one
    "helper_called_with_either_flag.py": 2,  # the causal call and the one to the memory
    "cosine_window_attention_softmax_in_both_arms.py": 1,  # the unshifted call, its per-head scale on the query
    "helper_called_with_aliased_arguments.py": 2,
    "prepared_mask_in_a_helper.py": 2,  # with the padding mask and without
}


def test_every_positive_is_listed() -> None:
    assert sorted(p.name for p in POSITIVE) == sorted(SDPA_CALLS)


@pytest.mark.parametrize("case", POSITIVE, ids=lambda p: p.name)
def test_rewritten_fixture_runs_sdpa(case: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    import adopter_kernels
    from adopter_kernels.equivalence import load_source_as_module

    calls: list[int] = []
    real = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    module = load_source_as_module(expected_path(case).read_text(encoding="utf-8"), f"adp010_sdpa_{case.stem}")
    torch.manual_seed(0)
    model, args, *kwargs = module.make_example()
    # SDPA forced: auto picks it on CUDA only (on CPU it measured slower at small sizes, docs/KERNEL_PERFORMANCE.md).
    with torch.no_grad(), adopter_kernels.use_backend("attention_core=sdpa"):
        model.eval()(*args, **(kwargs[0] if kwargs else {}))
    assert len(calls) == SDPA_CALLS[case.name]


def test_training_with_dropout_is_the_same_sample_on_the_reference_backend() -> None:
    torch = pytest.importorskip("torch")
    import adopter_kernels
    from adopter_kernels.equivalence import compare_models, load_source_as_module

    case = ADP010 / "nanogpt_block.py"
    source = case.read_text(encoding="utf-8").replace("dropout = 0.0", "dropout = 0.3")
    rewritten = rewrite_source(source, ["ADP010"]).code
    assert "attention_core" in rewritten
    models = []
    for text, name in ((source, "orig"), (rewritten, "new")):
        torch.manual_seed(0)
        models.append(load_source_as_module(text, f"adp010_dropout_{name}").make_example())
    (original, args), (new, _) = models
    with adopter_kernels.use_backend("reference"):
        report = compare_models(original, new, args, rtol=1e-9, atol=1e-9)
    report.raise_if_failed()
    assert "train" in report.modes


def test_adopt_all_fuses_the_core_after_fast_softmax() -> None:
    source = (ADP010 / "nanogpt_block.py").read_text(encoding="utf-8")
    code = rewrite_source(source, None).code
    assert "adopter_kernels.attention_core(" in code and "softmax" not in code.split("def forward")[1]


def test_a_mask_if_is_absorbed_only_for_the_name_it_tests() -> None:
    """`if attention_mask is not None: s = s + bias` adds something else than what it tests: not absorbed; the
    test becomes a fallback condition instead."""
    source = (ADP010 / "bert_mask_under_if.py").read_text(encoding="utf-8")
    source = source.replace("attention_scores = attention_scores + attention_mask", "attention_scores = attention_scores + head_mask")
    code = rewrite_source(source, ["ADP010"]).code
    assert "if attention_mask is not None or head_mask is not None or output_attentions:" in code
    assert ", mask=head_mask" not in code


def test_a_function_with_many_split_ifs_is_analysed() -> None:
    """Nine simple-test `if`s with ops make 512 paths: the graph holds each once, so the class is analysed with
    every one of them split."""
    ifs = "".join(f"if m{i} is not None:\n    x = x + m{i}\n" for i in range(9))
    params = ", ".join(f"m{i}" for i in range(9))
    source = _module(f"def forward(self, x, {params}):\n" + textwrap.indent(ifs + "return torch.relu(x)\n", "    "))
    (cls,) = build_module_structure(cst.parse_module(source)).classes
    (graph,) = cls.graphs
    assert not cls.truncated and len(graph.paths()) == 2**9


def test_fallback_refused_when_a_closure_reads_the_probabilities() -> None:
    source = (ADP010 / "vit_self_attention.py").read_text(encoding="utf-8")
    closure = "        def probs_now():\n            return attention_probs\n\n        mixed_query_layer ="
    source = source.replace("        mixed_query_layer =", closure, 1)
    assert not rewrite_source(source, ["ADP010"]).findings


@pytest.mark.parametrize(
    ("source", "name", "exact"),
    [
        ("def exists(x):\n    return x is not None\n", "exists", True),
        ("def exists(val):\n    '''doc'''\n    return val is not None\n", "exists", True),
        ("def present(v):\n    return v is not None\n", "present", True),
        ("def exists(val):\n    return val is None\n", "exists", False),
        ("def exists(val):\n    return val is not None and val.any()\n", "exists", False),
        ("def exists(val):\n    return val is not None\nexists = lambda v: True\n", "exists", False),  # rebound
        ("def exists(val):\n    return val is not None\ndef exists(val):\n    return True\n", "exists", False),
        ("import torch\n", "exists", False),  # not defined here
    ],
)
def test_not_none_helper_is_exactly_the_test(source: str, name: str, exact: bool) -> None:
    """An absorbed `if` may test `helper(X)` only where the helper is exactly `X is not None` and nothing rebinds it."""
    from adopter_codemods.structural_guards import is_not_none_helper

    assert is_not_none_helper(cst.parse_module(source), name) is exact


METADATA_SCALE = """\
import torch
from torch import nn


class A(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.1)

    def forward(self, q, k, v, lst, mask=None):
        s = q @ k.transpose(-2, -1) * SCALE
        if mask is not None:
            s = s + mask
        BETWEEN
        p = s.softmax(dim=-1)
        p = self.drop(p)
        return p @ v

    def grow(self, t):
        t.resize_(2, 2)
"""


@pytest.mark.parametrize(
    "scale,between",
    [("len(lst) ** -0.5", "lst.append(0)"), ("q.size(-1) ** -0.5", "self.grow(q)"), ("q.size(-1) ** -0.5", "q.resize_(2, 2)")],
)
def test_metadata_call_moved_past_a_call_that_may_change_what_it_reads_is_refused(scale: str, between: str) -> None:
    """A metadata call is pure (it moves to the fused call, after the mask's `if`), but what it reads must hold the
    same value there: a call in between that may change it in place is refused."""
    source = METADATA_SCALE.replace("SCALE", scale).replace("BETWEEN", between)
    assert not rewrite_source(source, ["ADP010"]).findings
    if between == "self.grow(q)":  # the reason names the caller's variable, not the helper's parameter `t`
        (site,) = refused_sites(source, ["ADP010"])
        assert site.reason.startswith("a call here may modify `q` in place") and site.cause_line == 14
    moved_freely = rewrite_source(source.replace(between, "n = 0"), ["ADP010"])
    assert f"scale={scale}, mask=mask, dropout=self.drop" in moved_freely.code
