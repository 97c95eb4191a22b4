"""Per-kernel backends: the registry, ``backends()``, per-kernel overrides, measured CPU policy, and the xformers
attention backend's selection (xformers and CUDA mocked: the selection logic runs on CPU)."""

from __future__ import annotations

import itertools
import math
import sys
import types
from typing import Any, Iterator, List, Optional

import pytest
import torch
from torch import nn

import adopter_kernels as ak
from adopter_kernels import _dispatch, attention_backends


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(ak.BACKEND_ENV, raising=False)
    _dispatch.clear_decisions()
    yield
    _dispatch.clear_decisions()


def test_backends_lists_every_kernel_with_reasons() -> None:
    report = ak.backends()
    assert {"softmax", "dropout_add_layer_norm", "linear_bias_activation", "conv_bn2d", "linear_bn1d",
            "packed_qkv_linear", "bert_self_attention", "t5_attention", "gpt2_attention", "attention_core", "rms_norm",
            "gated_linear_unit", "rotary_embedding"} <= set(report)
    for name, entry in report.items():
        rows = {row["name"]: row for row in entry["backends"]}  # type: ignore[union-attr]
        assert rows["reference"]["available"], name
        assert entry["forced"] == "auto"
        for row in rows.values():
            assert row["available"] or row["why_not"], (name, row)
    xformers = {row["name"]: row for row in report["bert_self_attention"]["backends"]}["xformers"]  # type: ignore
    if not torch.cuda.is_available():
        assert not xformers["available"] and "CUDA" in xformers["why_not"]


def test_auto_runs_the_original_on_cpu_where_not_measured_faster() -> None:
    """The CPU policy of docs/KERNEL_PERFORMANCE.md, as backends() reports it."""
    selects = {name: entry["auto_selects"] for name, entry in ak.backends().items()}
    for name in ("softmax", "dropout_add_layer_norm", "linear_bias_activation", "conv_bn2d", "linear_bn1d",
                 "packed_qkv_linear", "rms_norm", "gated_linear_unit", "rotary_embedding"):
        assert {v for k, v in selects[name].items() if k.startswith("cpu")} == {"reference"}, name  # type: ignore
    # float32, float16, and bfloat16 inference, from a size on (the size test: test_kernel_attention_core.py)
    core = {k: v for k, v in selects["attention_core"].items() if k.startswith("cpu")}  # type: ignore[union-attr]
    autocast = {f"cpu float32 {dtype}-autocast {mode}": "reference" for dtype in ("bfloat16", "float16")
                for mode in ("infer", "train")}  # the original's float32 softmax under autocast: never SDPA
    assert core == {"cpu float32 infer": "sdpa", "cpu float32 train": "sdpa", "cpu bfloat16 infer": "sdpa",
                    "cpu bfloat16 train": "reference", "cpu float16 infer": "sdpa", "cpu float16 train": "sdpa",
                    **autocast}
    for name in ("bert_self_attention", "gpt2_attention", "t5_attention", "bart_attention"):
        cpu = selects[name]
        float32 = "reference" if name == "t5_attention" else "sdpa"
        assert cpu["cpu float32 infer"] == cpu["cpu float32 train"] == float32  # type: ignore[index]
        assert cpu["cpu bfloat16 infer"] == "sdpa" and cpu["cpu bfloat16 train"] == "reference"  # type: ignore
        # float16 layers: from a size on in both modes (test_attention_cpu_sizes.py)
        assert cpu["cpu float16 infer"] == cpu["cpu float16 train"] == "sdpa"  # type: ignore[index]
        # float32 layers under autocast: SDPA from a size, but never for T5 in bfloat16-autocast training
        for key in ("float16-autocast infer", "float16-autocast train", "bfloat16-autocast infer"):
            assert cpu[f"cpu float32 {key}"] == "sdpa", key  # type: ignore[index]
        assert cpu["cpu float32 bfloat16-autocast train"] == float32  # type: ignore[index]


def _xformers_usable() -> bool:
    rows = {row["name"]: row for row in ak.backends()["bert_self_attention"]["backends"]}  # type: ignore[union-attr]
    return bool(rows["xformers"]["available"])


def test_auto_on_cuda_runs_what_measured_faster_on_a_gpu() -> None:
    """The CUDA policy of docs/KERNEL_PERFORMANCE.md (an H200, gpu_bench/results/h200-2026-11-28/)."""
    selects = {name: entry["auto_selects"] for name, entry in ak.backends().items()}

    def cuda(name: str) -> set:
        return {v for k, v in selects[name].items() if k.startswith("cuda")}  # type: ignore[union-attr]

    # Measured slower or no faster than the original on the GPU: the original runs.
    for name in ("softmax", "dropout_add_layer_norm", "linear_bias_activation", "conv_bn2d", "linear_bn1d",
                 "t5_attention", "gated_linear_unit", "rotary_embedding"):
        assert cuda(name) == {"reference"}, name
    # Measured faster: SDPA for BERT/GPT-2 attention and the attention core (by size: test_kernel_attention_core),
    # one packed QKV GEMM, and the Triton RMSNorm in inference (test_kernel_triton_llm_blocks).
    for name in ("bert_self_attention", "gpt2_attention"):
        assert cuda(name) == ({"xformers"} if _xformers_usable() else {"sdpa"}), name
    core = selects["attention_core"]
    assert {v for k, v in core.items() if k.startswith("cuda") and "autocast" not in k} == {"sdpa"}  # type: ignore
    assert {v for k, v in core.items() if k.startswith("cuda") and "autocast" in k} == {"reference"}  # type: ignore
    assert cuda("packed_qkv_linear") == {"packed"}


def test_per_kernel_override_wins_over_bare_name(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.zeros(2)
    monkeypatch.setenv(ak.BACKEND_ENV, "reference,packed_qkv_linear=packed")
    assert _dispatch.select("packed_qkv_linear", x) == "packed"
    assert _dispatch.select("bert_self_attention", x) == "reference"
    assert ak.current_backend() == "reference"
    with ak.use_backend("auto"):
        assert _dispatch.select("packed_qkv_linear", x) == "reference"  # CPU float32: measured no faster


def test_adp010_to_adp013_kernels_follow_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.zeros(2, 3, dtype=torch.float64)
    assert _dispatch.select("attention_core", x) == "reference"  # CPU float64: not measured
    monkeypatch.setenv(ak.BACKEND_ENV, "attention_core=sdpa")
    assert _dispatch.select("attention_core", x) == "sdpa"
    if _dispatch.triton_available():
        monkeypatch.setenv(ak.BACKEND_ENV, "reference,rms_norm=triton,gated_linear_unit=triton,rotary_embedding=triton")
        assert _dispatch.select("attention_core", x) == "reference"
        for name in ("rms_norm", "gated_linear_unit", "rotary_embedding"):
            assert _dispatch.select(name, x) == "triton", name
            assert ak.backends()[name]["forced"] == "triton"


@pytest.mark.parametrize("spec", ["softmax=fast", "nosuchkernel=reference", "cuda", "softmax=folded"])
def test_bad_specs_are_errors(spec: str) -> None:
    with pytest.raises(ValueError, match="ADOPTER_KERNELS_BACKEND"):
        with ak.use_backend(spec):
            pass


def test_forcing_an_unavailable_backend_raises() -> None:
    if torch.cuda.is_available():
        pytest.skip("xformers' reason here is about CUDA being absent")
    with ak.use_backend("bert_self_attention=xformers"):
        with pytest.raises(RuntimeError, match="xformers"):
            _dispatch.select("bert_self_attention", torch.zeros(2))


def test_forced_backend_that_does_not_support_the_call_falls_back_to_reference() -> None:
    with ak.use_backend("triton"), torch.autocast("cpu", dtype=torch.bfloat16):
        if _dispatch.triton_available():
            assert _dispatch.select("softmax", torch.zeros(2)) == "reference"


def test_reference_path_is_the_original_computation_on_cpu() -> None:
    """auto on CPU float64: every module-taking kernel calls the original modules (forward hooks see them)."""
    seen: List[str] = []
    conv, bn = nn.Conv2d(2, 3, 3).double(), nn.BatchNorm2d(3).double().eval()
    q, k, v = (nn.Linear(4, 4).double() for _ in range(3))
    x, y = torch.randn(1, 2, 5, 5, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)
    with torch.no_grad():
        expected_conv = bn(conv(x))
        expected_qkv = (q(y), k(y), v(y))
    assert _dispatch.select("conv_bn2d", x, training=False) == "reference"
    assert _dispatch.select("packed_qkv_linear", y) == "reference"
    for name, m in (("bn", bn), ("q", q)):
        m.register_forward_pre_hook(lambda *_, n=name: seen.append(n))  # type: ignore[misc]
    with torch.no_grad():
        torch.testing.assert_close(ak.conv_bn2d(x, conv, bn), expected_conv, rtol=0, atol=0)
        for got, want in zip(ak.packed_qkv_linear(y, q, k, v), expected_qkv):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert seen == ["bn", "q"]


def test_reference_only_names_the_kernels_whose_every_call_runs_the_original() -> None:
    """Under auto: the kernels none of whose other backends is faster anywhere (they skip even the decision);
    every kernel when forced to reference; a kernel forced to another backend, or with one faster somewhere, not."""
    never_faster = {"softmax", "dropout_add_layer_norm", "linear_bias_activation", "conv_bn2d", "linear_bn1d",
                    "gated_linear_unit", "rotary_embedding"}
    assert {name for name in _dispatch._KERNELS if _dispatch.reference_only(name)} == never_faster
    assert _dispatch.reference_only(*never_faster)
    assert not _dispatch.reference_only("softmax", "attention_core")
    with ak.use_backend("reference"):
        assert all(_dispatch.reference_only(name) for name in _dispatch._KERNELS)
    with ak.use_backend("auto,conv_bn2d=folded,rms_norm=reference"):
        assert not _dispatch.reference_only("conv_bn2d")
        assert _dispatch.reference_only("rms_norm", "linear_bn1d")
    assert _dispatch.reference_only("conv_bn2d") and not _dispatch.reference_only("rms_norm")


def test_reference_only_follows_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not _dispatch.reference_only("packed_qkv_linear")
    monkeypatch.setenv(ak.BACKEND_ENV, "packed_qkv_linear=reference")
    assert _dispatch.reference_only("packed_qkv_linear")
    monkeypatch.setenv(ak.BACKEND_ENV, "softmax=triton")
    assert not _dispatch.reference_only("softmax")


def test_a_new_kernel_with_a_faster_backend_is_not_reference_only() -> None:
    _dispatch.register_kernel("test_only_kernel", _dispatch.Backend("fast", "for this test", faster=lambda c: False))
    try:
        assert not _dispatch.reference_only("test_only_kernel")  # `faster` may say yes for some call
    finally:
        del _dispatch._KERNELS["test_only_kernel"]
        _dispatch.clear_decisions()


def test_fused_sequential_runs_the_plain_loop_where_every_pair_runs_the_original(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under auto no pair kernel of FusedSequential has a faster backend: it is nn.Sequential's loop, without the
    per-call tests of its children (a forced backend brings them back)."""
    from adopter_kernels import batch_norm

    asked: List[nn.Module] = []

    def classify(module: nn.Module, **kwargs: Any) -> Optional[str]:
        asked.append(module)
        return None

    monkeypatch.setattr(batch_norm, "classify_activation", classify)
    torch.manual_seed(0)
    seq = ak.FusedSequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 4)).eval()
    x = torch.randn(2, 4)
    expected = nn.Sequential(*seq)(x)
    torch.testing.assert_close(seq(x), expected, rtol=0, atol=0)
    assert asked == []
    with ak.use_backend("conv_bn2d=folded"):
        torch.testing.assert_close(seq(x), expected, rtol=0, atol=0)
    assert asked == [seq[1]]


def test_new_kernels_plug_in() -> None:
    fast = _dispatch.Backend("fast", "everywhere, for this test", faster=lambda call: call.device == "cpu")
    _dispatch.register_kernel("test_only_kernel", fast)
    try:
        assert _dispatch.select("test_only_kernel", torch.zeros(1)) == "fast"
        with ak.use_backend("test_only_kernel=reference"):
            assert _dispatch.select("test_only_kernel", torch.zeros(1)) == "reference"
        assert ak.backends()["test_only_kernel"]["auto_selects"]["cpu float32 train"] == "fast"  # type: ignore
    finally:
        del _dispatch._KERNELS["test_only_kernel"]
        _dispatch.clear_decisions()


# --- xformers (mocked) --------------------------------------------------------------------------------------------


def _fake_xformers() -> types.ModuleType:
    """xformers.ops' API: [B, S, H, D] tensors, an additive [B, H, Sq, Sk] bias or a causal mask object, p, scale."""
    ops = types.ModuleType("xformers.ops")

    class LowerTriangularMask:
        pass

    def memory_efficient_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_bias: Any = None,
                                   p: float = 0.0, scale: Optional[float] = None) -> torch.Tensor:
        assert q.dim() == 4 and p == 0.0
        scores = torch.einsum("bmhk,bnhk->bhmn", q, k) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
        if isinstance(attn_bias, LowerTriangularMask):
            m, n = scores.shape[-2:]
            scores = scores.masked_fill(torch.ones(m, n, dtype=torch.bool).triu(1), float("-inf"))
        elif attn_bias is not None:
            assert attn_bias.shape == scores.shape  # xformers wants the full bias shape
            scores = scores + attn_bias
        return torch.einsum("bhmn,bnhk->bmhk", scores.softmax(-1), v)

    ops.LowerTriangularMask = LowerTriangularMask  # type: ignore[attr-defined]
    ops.memory_efficient_attention = memory_efficient_attention  # type: ignore[attr-defined]
    return ops


@pytest.fixture
def fake_xformers(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    ops = _fake_xformers()
    monkeypatch.setattr(attention_backends, "xformers_ops", lambda: ops)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    return ops


def _qkv() -> List[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(2, 3, 5, 4, dtype=torch.float64) for _ in range(3)]


@pytest.mark.parametrize("causal", [False, True])
def test_xformers_core_equals_sdpa(fake_xformers: types.ModuleType, causal: bool) -> None:
    q, k, v = _qkv()
    mask = None if causal else torch.randn(2, 1, 1, 5, dtype=torch.float64)
    args = (q, k, v, mask, 0.0, causal, 0.3)
    want = attention_backends.fast_attention("bert_self_attention", "sdpa", *args)
    with ak.use_backend("bert_self_attention=xformers"):
        got = attention_backends.fast_attention("bert_self_attention", "xformers", *args)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


def test_xformers_is_a_cuda_only_candidate(fake_xformers: types.ModuleType) -> None:
    report = ak.backends()["gpt2_attention"]
    rows = {row["name"]: row for row in report["backends"]}  # type: ignore[union-attr]
    assert rows["xformers"]["available"]
    assert report["auto_selects"]["cuda float32 train"] == "xformers"  # type: ignore[index]
    assert report["auto_selects"]["cpu float32 train"] == "sdpa"  # type: ignore[index]


def test_t5_never_picks_xformers_unforced(fake_xformers: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its per-shape timing races xformers against SDPA, which lost to T5's original attention on an H200."""
    report = ak.backends()["t5_attention"]
    assert {v for k, v in report["auto_selects"].items() if k.startswith("cuda")} == {"reference"}  # type: ignore
    monkeypatch.setenv(ak.BACKEND_ENV, "t5_attention=xformers")
    assert ak.backends()["t5_attention"]["forced"] == "xformers"


@pytest.mark.parametrize("xformers_faster", [True, False])
def test_tuner_keeps_xformers_only_where_measured_faster(fake_xformers: types.ModuleType,
                                                         xformers_faster: bool) -> None:
    """The tuner times both cores on the call; the clock is mocked so that one of them is slower."""
    ticks = itertools.count()
    current: List[str] = []
    slow = "sdpa" if xformers_faster else "xformers"

    def clock() -> float:  # each timed call lasts 1 tick, the slow core's 3
        return float(next(ticks) * (3 if current and current[-1] == slow else 1))

    tuner = attention_backends._Tuner(repeats=2, clock=clock)
    cores = dict(attention_backends._CORES)
    for name in ("sdpa", "xformers"):
        def timed(*args: Any, _name: str = name) -> torch.Tensor:
            current.append(_name)
            return cores[_name](*args)
        attention_backends._CORES[name] = timed
    try:
        q, k, v = _qkv()
        winner = tuner.choose(q, k, v, None, 0.0, False, 0.5)
        assert winner == ("xformers" if xformers_faster else "sdpa")
        calls = len(current)
        assert tuner.choose(q, k, v, None, 0.0, False, 0.5) == winner and len(current) == calls  # remembered
        tuner.choose(q[:1], k[:1], v[:1], None, 0.0, False, 0.5)  # another shape: timed again
        assert len(current) > calls
    finally:
        attention_backends._CORES.update(cores)


def test_tuner_leaves_the_rng_stream_alone(fake_xformers: types.ModuleType) -> None:
    q, k, v = _qkv()
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    attention_backends._Tuner(repeats=1).choose(q, k, v, None, 0.0, False, 0.5)
    torch.testing.assert_close(torch.rand(3), expected)


def test_no_xformers_import_on_cpu_only_machines() -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA machine")
    ak.backends()
    assert "xformers" not in sys.modules
