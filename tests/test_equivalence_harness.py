"""Tests for adopter_kernels.equivalence: it must pass on equivalent code and FAIL on genuinely different code."""

from __future__ import annotations

import pickle
import sys
import textwrap
import traceback

import pytest

torch = pytest.importorskip("torch")

from adopter_kernels.equivalence import (  # noqa: E402
    EquivalenceReport,
    OriginalModelError,
    assert_equivalent,
    check_equivalent,
    compare_models,
    default_dtype,
    load_source_as_module,
    seeded,
)
from torch import nn  # noqa: E402

# A small model touching every checked aspect: Linear + activation, Dropout, BatchNorm1d (buffers), LayerNorm.
BASE = textwrap.dedent(
    """
    import torch
    from torch import nn
    import torch.nn.functional as F


    class Block(nn.Module):
        def __init__(self, dim=8):
            super().__init__()
            self.dense = nn.Linear(dim, dim)
            self.act = nn.GELU()
            self.drop = nn.Dropout(0.5)
            self.bn = nn.BatchNorm1d(dim)
            self.ln = nn.LayerNorm(dim)

        def forward(self, x, residual=None):
            h = self.drop(self.act(self.dense(x)))
            h = self.bn(h)
            if residual is not None:
                h = h + residual
            return self.ln(h)


    def make_example():
        return Block(), (torch.randn(4, 8),), {"residual": torch.randn(4, 8)}
    """
)


def _variant(old: str, new: str) -> str:
    assert old in BASE, old
    return BASE.replace(old, new)


def _load(source: str, tag: str):
    return load_source_as_module(source, f"_equiv_test_{tag}")


def _report(rewritten_source: str, **kwargs) -> EquivalenceReport:
    return check_equivalent(_load(BASE, "orig"), _load(rewritten_source, "new"), **kwargs)


# --------------------------------------------------------------------------------------------------------------
# passes on equivalent code
# --------------------------------------------------------------------------------------------------------------


def test_identical_source_is_equivalent_in_both_modes() -> None:
    report = _report(BASE)
    assert report.ok, report.format()
    assert report.modes == ("eval", "train")
    assert set(report.max_abs_diff) == {"eval", "train"}
    # outputs + 2 input grads + 6 param grads + 3 BN buffers, per mode
    assert report.compared == 2 * (1 + 2 + 6 + 3)


def test_functional_rewrite_with_same_semantics_is_equivalent() -> None:
    # What a fusion rule does: call functional ops on the existing layers' parameters; dropout under same seed.
    rewritten = _variant(
        "        h = self.drop(self.act(self.dense(x)))",
        "        h = F.dropout(F.gelu(F.linear(x, self.dense.weight, self.dense.bias)), 0.5, self.training)",
    )
    assert_equivalent(_load(BASE, "orig"), _load(rewritten, "new"))


def test_differences_within_tolerance_pass_and_beyond_fail() -> None:
    rewritten = _variant("        return self.ln(h)", "        return self.ln(h) + 1e-11")
    assert _report(rewritten).ok
    # float32 rounding (~1e-7) is a real difference at the default float64 tolerance of 1e-9.
    rewritten = _variant("        return self.ln(h)", "        return self.ln(h) + 1e-7")
    assert not _report(rewritten).ok
    assert _report(rewritten, rtol=0, atol=1e-6).ok


def test_models_and_inputs_are_built_and_run_in_float64() -> None:
    probe = BASE.replace(
        "        return self.ln(h)", "        SEEN.append((x.dtype, torch.ones(1).dtype))\n        return self.ln(h)"
    ).replace("def make_example():\n", "SEEN = []\n\n\ndef make_example():\n")
    module = _load(probe, "probe")
    assert check_equivalent(module, module).ok
    assert set(module.SEEN) == {(torch.float64, torch.float64)}  # inputs, and tensors made inside forward
    assert torch.get_default_dtype() == torch.float32  # restored afterwards
    module.SEEN.clear()
    assert check_equivalent(module, module, dtype=torch.float32, rtol=1e-5, atol=1e-6).ok
    assert set(module.SEEN) == {(torch.float32, torch.float32)}


def test_default_dtype_is_restored_when_the_body_raises() -> None:
    with pytest.raises(RuntimeError, match="inside"):
        with default_dtype(torch.float64):
            assert torch.ones(1).dtype == torch.float64
            raise RuntimeError("inside")
    assert torch.get_default_dtype() == torch.float32


def test_result_does_not_depend_on_rng_use_before_it() -> None:
    # Inputs, initialisation and dropout masks are all drawn under the harness's own seed.
    first = _report(BASE)
    torch.rand(1000)
    second = _report(BASE)
    with seeded(123):
        third = _report(BASE)
    assert first.ok and first.max_abs_diff == second.max_abs_diff == third.max_abs_diff


# Key bias: adding b to every key adds q.b to a whole row of scores, which softmax ignores, so its gradient is
# zero in exact arithmetic and pure rounding noise in practice; the output is scaled so that noise exceeds atol.
ATTENTION = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Attention(nn.Module):
        def __init__(self, dim=8):
            super().__init__()
            self.q = nn.Linear(dim, dim)
            self.k = nn.Linear(dim, dim)

        def forward(self, x):
            scores = self.q(x) @ self.k(x).transpose(-1, -2)
            return scores.softmax(-1) * 1e9


    def make_example():
        return Attention(), (torch.randn(2, 5, 8),)
    """
)


def test_gradient_zero_in_exact_arithmetic_is_judged_against_the_largest_gradient() -> None:
    # Same function, the key bias's contribution computed separately: other rounding in every gradient.
    split = ATTENTION.replace(
        "scores = self.q(x) @ self.k(x).transpose(-1, -2)",
        "q = self.q(x)\n"
        "        k = nn.functional.linear(x, self.k.weight)\n"
        "        scores = q @ k.transpose(-1, -2) + (q @ self.k.bias)[..., None]",
    )
    original, rewritten = _load(ATTENTION, "att_orig"), _load(split, "att_split")
    report = check_equivalent(original, rewritten)
    assert report.ok, report.format()
    # The key bias's gradient really is noise above atol: an absolute judgement would have failed.
    with default_dtype(torch.float64), seeded(0):
        model, (x,) = original.make_example()
    model(x).sum().backward()
    assert 0 < model.k.bias.grad.abs().max() and report.max_abs_diff["eval"] > report.atol
    # A gradient that really differs (the same output, ~10x the scaled tolerance on the key bias) still fails.
    wrong = ATTENTION.replace("* 1e9", "* 1e9 + 10.0 * (self.k.bias - self.k.bias.detach()).sum()")
    report = check_equivalent(original, _load(wrong, "att_wrong"))
    assert {(m.kind, m.name) for m in report.mismatches} == {("param_grad", "k.bias")}, report.format()


# --------------------------------------------------------------------------------------------------------------
# fails on genuinely different code
# --------------------------------------------------------------------------------------------------------------


def test_fails_on_different_activation() -> None:
    report = _report(_variant("self.act = nn.GELU()", "self.act = nn.ReLU()"))
    assert not report.ok
    kinds = {(m.kind, m.mode) for m in report.mismatches}
    assert ("output", "eval") in kinds and ("output", "train") in kinds
    message = report.format()
    assert "output" in message and "[eval]" in message and "max abs diff" in message


def test_complex_outputs_differing_in_their_imaginary_part_report_the_difference() -> None:
    class Conjugate(nn.Module):
        def __init__(self, sign: float) -> None:
            super().__init__()
            self.sign = sign

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.complex(x, self.sign * x)

    with default_dtype(torch.float64):
        x = torch.linspace(1.0, 2.0, 3)
        report = compare_models(Conjugate(1.0), Conjugate(-1.0), (x,))
    assert not report.ok
    assert {m.max_abs_diff for m in report.mismatches} == {4.0}  # |2i * x| at x = 2


def test_fails_when_dropout_is_applied_in_eval() -> None:
    # The epoi bug (docs/DESIGN.md §3): the training flag frozen at construction.
    rewritten = _variant(
        "        h = self.drop(self.act(self.dense(x)))",
        "        h = F.dropout(self.act(self.dense(x)), 0.5, training=True)",
    )
    report = _report(rewritten)
    assert not report.ok
    assert {m.mode for m in report.mismatches} == {"eval"}, report.format()


def test_fails_on_missing_running_stats_update() -> None:
    # Same outputs in training (batch statistics), but running_mean/var are never updated.
    rewritten = _variant(
        "        h = self.bn(h)",
        "        h = F.batch_norm(h, None, None, self.bn.weight, self.bn.bias, True, 0.1, self.bn.eps)"
        " if self.training else self.bn(h)",
    )
    report = _report(rewritten)
    assert not report.ok
    bad = {(m.kind, m.mode, m.name) for m in report.mismatches}
    assert ("buffer", "train", "bn.running_mean") in bad
    assert ("buffer", "train", "bn.num_batches_tracked") in bad
    assert not any(m.kind == "output" for m in report.mismatches), report.format()


def test_fails_on_renamed_parameter() -> None:
    rewritten = _variant("self.dense = nn.Linear(dim, dim)", "self.proj = nn.Linear(dim, dim)").replace(
        "self.dense(x)", "self.proj(x)"
    )
    report = _report(rewritten)
    assert not report.ok
    names = {(m.kind, m.name) for m in report.mismatches}
    assert ("state_dict", "dense.weight") in names and ("state_dict", "proj.weight") in names
    with pytest.raises(AssertionError, match=r"state_dict dense\.weight: missing in the rewritten model"):
        report.raise_if_failed()


def test_fails_on_changed_parameter_shape() -> None:
    rewritten = _variant("self.ln = nn.LayerNorm(dim)", "self.ln = nn.LayerNorm(dim, bias=False)")
    assert any(m.name == "ln.bias" for m in _report(rewritten).mismatches)


def test_fails_on_wrong_parameter_gradient_with_identical_output() -> None:
    # 2w - w.detach() has the value of w but twice its gradient.
    rewritten = _variant(
        "        h = self.drop(self.act(self.dense(x)))",
        "        w = 2 * self.dense.weight - self.dense.weight.detach()\n"
        "        h = self.drop(self.act(F.linear(x, w, self.dense.bias)))",
    )
    report = _report(rewritten)
    assert {(m.kind, m.name) for m in report.mismatches} == {("param_grad", "dense.weight")}, report.format()


def test_fails_on_wrong_input_gradient_with_identical_output() -> None:
    rewritten = _variant(
        "        return self.ln(h)", "        return self.ln(h.detach() + residual - residual.detach())"
    )
    report = _report(rewritten)
    assert not report.ok
    assert {m.kind for m in report.mismatches} >= {"input_grad", "param_grad"}
    assert any(m.name == "args[0]" for m in report.mismatches)


def test_rewritten_forward_raising_is_reported_not_raised() -> None:
    rewritten = _variant("        return self.ln(h)", "        raise RuntimeError('kernel missing')")
    report = _report(rewritten, modes=("eval",))
    assert [m.kind for m in report.mismatches] == ["error"]
    assert "kernel missing" in report.format()


def test_the_original_raising_is_an_error_of_the_inputs_not_a_mismatch() -> None:
    """A comparison whose original fails on the inputs compares nothing: it raises naming the original (it used to
    surface as the original's own exception, read as a failed rewrite)."""
    failing = _variant("        return self.ln(h)", "        raise ValueError('needs a mask')")
    with pytest.raises(OriginalModelError, match=r"the original model raised in eval mode \(ValueError: needs a mask\)"):
        check_equivalent(_load(failing, "orig_raises"), _load(BASE, "new_fine"), modes=("eval",))


def test_an_all_nan_original_output_is_a_mismatch() -> None:
    """NaN compares equal to NaN (eager's fully masked rows need it), so a model whose output is NaN throughout
    (a torch.empty weight left uninitialised) would match any rewrite of it: reported instead."""
    nan = _variant("        return self.ln(h)", "        return self.ln(h) * float('nan')")
    report = check_equivalent(_load(nan, "orig_nan"), _load(nan, "new_nan"), modes=("eval",))
    assert [m.kind for m in report.mismatches] == ["output"]
    assert "proves nothing" in report.format()


def test_assert_equivalent_raises_with_names() -> None:
    with pytest.raises(AssertionError, match=r"\[train\] buffer bn\.running_var"):
        rewritten = _variant("nn.BatchNorm1d(dim)", "nn.BatchNorm1d(dim, momentum=0.5)")
        assert_equivalent(_load(BASE, "orig"), _load(rewritten, "new"))


# --------------------------------------------------------------------------------------------------------------
# outputs of every shape: ModelOutput-like dicts, dataclasses, tuples with None, non-tensor values
# --------------------------------------------------------------------------------------------------------------

STRUCTURED = textwrap.dedent(
    """
    import dataclasses
    from typing import Optional
    import torch
    from torch import nn


    @dataclasses.dataclass
    class Out:
        hidden: torch.Tensor
        extra: Optional[torch.Tensor] = None


    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x, mask):
            h = self.lin(x)
            return {"main": Out(h, SCALE * h), "aux": (None, h.sum(), mask.long(), "tag")}


    SCALE = 2.0


    def make_example():
        return M(), (torch.randn(3, 4), torch.ones(3, dtype=torch.bool))
    """
)


def test_structured_outputs_are_walked() -> None:
    original = _load(STRUCTURED, "s_orig")
    assert check_equivalent(original, _load(STRUCTURED, "s_same")).ok
    report = check_equivalent(original, _load(STRUCTURED.replace("SCALE = 2.0", "SCALE = 3.0"), "s_diff"))
    assert {m.name for m in report.mismatches} >= {"output.main.extra"}
    report = check_equivalent(original, _load(STRUCTURED.replace('"tag"', '"other"'), "s_tag"))
    assert {m.name for m in report.mismatches} == {"output.aux[3]"}


def test_compare_models_with_prebuilt_models_and_tensor_args() -> None:
    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
    b = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())  # different init: state is loaded from `a`
    assert compare_models(a, b, torch.randn(2, 4)).ok
    c = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sigmoid())
    assert not compare_models(a, c, torch.randn(2, 4), modes=("eval",)).ok


def test_global_rng_state_is_left_untouched() -> None:
    state = torch.get_rng_state()
    _report(BASE)
    assert torch.equal(state, torch.get_rng_state())


def test_bad_factory_and_mode_errors_are_clear() -> None:
    module = _load("x = 1\n", "nofactory")
    with pytest.raises(AttributeError, match="defines no callable make_example"):
        check_equivalent(module, module)
    with pytest.raises(ValueError, match="unknown mode"):
        _report(BASE, modes=("predict",))


# --------------------------------------------------------------------------------------------------------------
# load_source_as_module
# --------------------------------------------------------------------------------------------------------------


def test_loaded_module_supports_dataclasses_and_pickling() -> None:
    module = load_source_as_module(STRUCTURED, "_equiv_test_pickle")
    assert sys.modules["_equiv_test_pickle"] is module
    value = module.Out(torch.ones(1))
    assert pickle.loads(pickle.dumps(value)).hidden.item() == 1.0


def test_loaded_module_keeps_its_own_future_imports() -> None:
    """The loaded source does not inherit this harness's `from __future__ import annotations`: its annotations are
    objects, as when the file is imported (transformers reads `config_class` and dataclass field types)."""
    module = load_source_as_module("import torch\nx: torch.Tensor\n", "_equiv_test_annotations")
    assert module.__annotations__ == {"x": torch.Tensor}
    lazy = load_source_as_module(
        "from __future__ import annotations\nimport torch\nx: torch.Tensor\n", "_equiv_test_annotations_lazy"
    )
    assert lazy.__annotations__ == {"x": "torch.Tensor"}


def test_failed_load_is_unregistered_and_traceback_shows_source() -> None:
    source = "import torch\n\n\ndef f():\n    raise ValueError('boom from line five')\n\nf()\n"
    with pytest.raises(ValueError) as info:
        load_source_as_module(source, "_equiv_test_broken", path="rewritten/modeling_x.py")
    assert "_equiv_test_broken" not in sys.modules
    text = "".join(traceback.format_exception(info.value))
    assert 'rewritten/modeling_x.py", line 5' in text and "raise ValueError('boom from line five')" in text


def test_relative_imports_resolve_with_package() -> None:
    transformers = pytest.importorskip("transformers")
    from pathlib import Path

    path = Path(transformers.__file__).parent / "models" / "bert" / "modeling_bert.py"
    module = load_source_as_module(
        path.read_text(),
        "transformers.models.bert.modeling_bert_adopted",
        package="transformers.models.bert",
        path=str(path),
    )
    config = transformers.BertConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, vocab_size=50
    )
    original = transformers.BertModel(config)
    ids = torch.randint(0, 50, (2, 5))
    report = compare_models(original, module.BertModel(config), (ids,), {"attention_mask": torch.ones(2, 5)})
    assert report.ok, report.format()


class _Versioned(nn.Module):
    """Reads its state-dict version, as torchvision's MNASNet does: a state dict without `_metadata` is refused."""

    _version = 2

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args):  # type: ignore[no-untyped-def]
        if local_metadata.get("version") != 2:
            raise ValueError("no version: an old checkpoint")
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


def test_state_dict_metadata_is_kept_between_modes() -> None:
    """compare_models reloads the original's state before each mode, with its `_metadata` (it was dropped, and a
    module reading its version raised ValueError out of the harness)."""
    with default_dtype(torch.float64):
        a, b = _Versioned(), _Versioned()
        report = compare_models(a, b, (torch.randn(2, 3),))
    assert report.ok, report.format()
