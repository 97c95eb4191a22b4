"""ADP010: attention_core == the hand-written attention it replaces, on the SDPA fast path and the reference path
(float64, CPU); the fast path is taken exactly where the module docstring says. The SDPA backend is forced here
(``auto`` picks it on CUDA only: on CPU it measured slower at small sizes)."""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Iterator, Optional

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import adopter_kernels
from adopter_kernels import attention_core, use_backend

B, H, L, S, E = 2, 3, 5, 6, 8


def _qkv(rank: int = 4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    lead = (B, H) if rank == 4 else (B * H,)
    shape = lambda n: (*lead, n, E)  # noqa: E731
    return tuple(torch.randn(shape(n), generator=g, dtype=torch.float64, requires_grad=True) for n in (L, S, S))  # type: ignore[return-value]


def _eager(q, k, v, *, scale=None, divisor=None, mask=None, masked_inf=None, masked_min=None, drop=None):  # type: ignore[no-untyped-def]
    """The code the rule rewrites, written out by hand."""
    s = q @ k.transpose(-2, -1)
    if scale is not None:
        s = s * scale
    if divisor is not None:
        s = s / divisor
    if mask is not None:
        s = s + mask
    if masked_inf is not None:
        s = s.masked_fill(masked_inf, float("-inf"))
    if masked_min is not None:
        s = s.masked_fill(masked_min, torch.finfo(s.dtype).min)
    p = F.softmax(s, dim=-1)
    if drop is not None:
        p = drop(p)
    return p @ v


@pytest.fixture(autouse=True)
def _force_sdpa() -> Iterator[None]:
    with use_backend("attention_core=sdpa"):
        yield


@pytest.fixture
def sdpa_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = F.scaled_dot_product_attention

    def counting(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting)
    return calls


def _check(fn_new: Callable[..., torch.Tensor], fn_old: Callable[..., torch.Tensor], rank: int = 4) -> None:
    outs, grads = [], []
    for fn in (fn_old, fn_new):
        q, k, v = _qkv(rank)
        out = fn(q, k, v)
        out.backward(torch.ones_like(out))
        outs.append(out.detach())
        grads.append([t.grad for t in (q, k, v)])
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-9, atol=1e-9, equal_nan=True)
    for g_new, g_old in zip(grads[1], grads[0]):
        torch.testing.assert_close(g_new, g_old, rtol=1e-9, atol=1e-9, equal_nan=True)


def _causal_masked() -> torch.Tensor:
    return torch.ones(L, S, dtype=torch.bool).tril(1).logical_not().view(1, 1, L, S)


CASES = {
    "scale": dict(scale=0.3),
    "divisor": dict(divisor=math.sqrt(E)),
    "no scale (q pre-scaled)": dict(),
    "additive mask": dict(divisor=math.sqrt(E), mask=torch.randn(B, 1, 1, S, dtype=torch.float64)),
    "hf finfo.min padding mask": dict(
        scale=0.5,
        mask=torch.zeros(B, 1, 1, S, dtype=torch.float64).index_fill_(3, torch.tensor([0, 4]), torch.finfo(torch.float64).min),
    ),
    "causal masked_fill -inf": dict(scale=0.5, masked_inf=_causal_masked()),
    "causal masked_fill finfo.min": dict(scale=0.5, masked_min=_causal_masked()),
}


@pytest.mark.parametrize("name", list(CASES))
def test_fast_path_matches_eager(name: str, sdpa_calls: list[int]) -> None:
    kw = CASES[name]
    _check(lambda q, k, v: attention_core(q, k.transpose(-2, -1), v, **kw), lambda q, k, v: _eager(q, k, v, **kw))
    assert sdpa_calls, "expected the SDPA fast path"


def test_three_dim_bmm_form(sdpa_calls: list[int]) -> None:
    _check(
        lambda q, k, v: attention_core(q, k.transpose(1, 2), v, batched=True),
        lambda q, k, v: torch.bmm(F.softmax(torch.bmm(q, k.transpose(1, 2)), dim=-1), v),
        rank=3,
    )
    assert sdpa_calls


@pytest.mark.parametrize("kind", ["masked_inf", "masked_min"])
def test_fully_masked_rows_run_the_reference(kind: str, sdpa_calls: list[int]) -> None:
    masked = torch.zeros(B, 1, L, S, dtype=torch.bool)
    masked[0, 0, 2] = True  # eager: NaN row (-inf) or uniform row (finfo.min); SDPA would give zeros
    _check(
        lambda q, k, v: attention_core(q, k.transpose(-2, -1), v, scale=0.5, **{kind: masked}),
        lambda q, k, v: _eager(q, k, v, scale=0.5, **{kind: masked}),
    )
    assert not sdpa_calls


@pytest.mark.parametrize("kind", ["mask", "masked_inf"])
def test_a_mask_batched_by_vmap_runs_the_reference(kind: str, sdpa_calls: list[int]) -> None:
    """Per-sample masks under torch.func.vmap (per-sample gradients, padded batches): the mask's data checks would
    be data-dependent control flow, which vmap refuses; the original runs there, so must the rewrite. Without a
    mask there is nothing to check and vmap runs SDPA."""
    q, k, v = _qkv()
    g = torch.Generator().manual_seed(1)
    masks = {
        "mask": torch.randn(B, 1, 1, S, generator=g, dtype=torch.float64),
        "masked_inf": torch.rand(B, 1, L, S, generator=g) < 0.3,
    }
    masks["masked_inf"][..., 0] = False  # every row keeps a key
    per_sample = masks[kind]
    kw = lambda m: {kind: m[None]}  # noqa: E731
    fused = torch.func.vmap(lambda a, b, c, m: attention_core(a[None], b[None].transpose(-2, -1), c[None], scale=0.5, **kw(m)))
    eager = torch.func.vmap(lambda a, b, c, m: _eager(a[None], b[None], c[None], scale=0.5, **kw(m)))
    torch.testing.assert_close(fused(q, k, v, per_sample), eager(q, k, v, per_sample), rtol=1e-9, atol=1e-9)
    assert not sdpa_calls
    torch.func.vmap(lambda a, b, c: attention_core(a[None], b[None].transpose(-2, -1), c[None], scale=0.5))(q, k, v)
    assert sdpa_calls


def test_under_grad_the_output_has_the_originals_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA's SDPA returns a transposed [B, S, H, D] buffer (given here on CPU). Under grad the kernel returns a
    contiguous copy, as `probs @ value` is: the layout carries on otherwise (timm's cpubone reshapes the output into a
    channels-last conv input), and a training Dropout after the conv draws its mask in memory order, another sample.
    Without grad the output keeps SDPA's layout (no copy)."""
    import importlib

    functional = importlib.import_module("adopter_kernels.attention_core").F
    real = functional.scaled_dot_product_attention
    monkeypatch.setattr(
        functional, "scaled_dot_product_attention",
        lambda *a, **k: real(*a, **k).transpose(1, 2).contiguous().transpose(1, 2),
    )
    q, k, v = _qkv()
    heads, n, side = q.shape[1], q.shape[-1], 2
    q, k, v = (t[:, :, :4].detach().requires_grad_() for t in (q, k, v))  # 4 queries and keys: a 2x2 map
    conv = nn.Conv2d(heads * n, heads * n, 1).double()
    drop = nn.Dropout(0.5).train()

    def tail(values: torch.Tensor) -> torch.Tensor:  # timm/models/cpubone.py's ConvAttention, then a dropout
        return drop(conv(values.permute(0, 1, 3, 2).reshape(B, heads * n, side, side)))

    torch.manual_seed(1)
    want = tail(_eager(q, k, v, scale=0.3))
    torch.manual_seed(1)
    got = tail(attention_core(q, k.transpose(-2, -1), v, scale=0.3))
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    with torch.no_grad():
        assert not attention_core(q, k.transpose(-2, -1), v, scale=0.3).is_contiguous()


def test_bmm_form_keeps_bmm_errors() -> None:
    q, k, v = _qkv(rank=4)
    with pytest.raises(RuntimeError):
        torch.bmm(q, k.transpose(-2, -1))
    with pytest.raises(RuntimeError):
        attention_core(q, k.transpose(-2, -1), v, batched=True)


@pytest.mark.parametrize("backend", ["reference", "attention_core=sdpa"])
@pytest.mark.parametrize("name, operator", [("scale", "*"), ("divisor", "/")])
def test_a_none_scale_fails_as_the_original(name: str, operator: str, backend: str) -> None:
    """`scores * scale` with a `scale=None` parameter left unset raises; the rewrite must not compute unscaled."""
    q, k, v = _qkv()
    scores = q @ k.transpose(-2, -1)
    with pytest.raises(TypeError) as original:
        scores * None if operator == "*" else scores / None  # type: ignore[operator]
    with use_backend(backend), pytest.raises(TypeError) as rewritten:
        attention_core(q, k.transpose(-2, -1), v, **{name: None})
    assert str(rewritten.value) == str(original.value)


@pytest.mark.parametrize("row", [float("-inf"), torch.finfo(torch.float64).min, -1e20])
def test_additive_mask_without_a_kept_key_runs_the_reference(row: float, sdpa_calls: list[int]) -> None:
    mask = torch.zeros(B, 1, L, S, dtype=torch.float64)
    mask[1, 0, 3] = row  # eager: NaN or uniform row; SDPA: zeros, or the same output with another gradient
    _check(
        lambda q, k, v: attention_core(q, k.transpose(-2, -1), v, mask=mask),
        lambda q, k, v: _eager(q, k, v, mask=mask),
    )
    assert not sdpa_calls


@pytest.mark.parametrize("shape", [(), (H, 1, 1), (B, 1, L, 1), (L, 1)])
def test_a_scale_per_query_row_or_coarser_scales_the_query(shape: tuple[int, ...], sdpa_calls: list[int]) -> None:
    """timm's SwinV2 multiplies the scores by a per-head `logit_scale.exp()`: SDPA takes it on the query, and the
    scale's gradient is the original's."""
    outs, grads = [], []
    for fused in (False, True):
        q, k, v = _qkv()
        scale = (torch.rand(shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64) + 0.5)
        scale.requires_grad_(True)
        mask = torch.randn(H, L, S, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        out = (attention_core(q, k.transpose(-2, -1), v, scale=scale, mask=mask) if fused
               else _eager(q, k, v, scale=scale, mask=mask))
        out.backward(torch.ones_like(out))
        outs.append(out.detach())
        grads.append([t.grad for t in (q, k, v, scale)])
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-9, atol=1e-9)
    for g_new, g_old in zip(grads[1], grads[0]):
        torch.testing.assert_close(g_new, g_old, rtol=1e-9, atol=1e-9)
    assert len(sdpa_calls) == 1


def test_tensor_scale_per_key_and_broadcasting_mask_run_the_reference(sdpa_calls: list[int]) -> None:
    per_key = torch.rand(S, dtype=torch.float64) + 0.5  # varies along the keys: it cannot scale the query
    _check(lambda q, k, v: attention_core(q, k.transpose(-2, -1), v, scale=per_key), lambda q, k, v: _eager(q, k, v, scale=per_key))
    wider = torch.full((4, 1, 1, 1, 1), 0.25, dtype=torch.float64)  # broadcasting makes the scores bigger
    _check(lambda q, k, v: attention_core(q, k.transpose(-2, -1), v, scale=wider), lambda q, k, v: _eager(q, k, v, scale=wider))
    single = torch.tensor(0.25, dtype=torch.float32)  # another dtype than the query's
    _check(lambda q, k, v: attention_core(q, k.transpose(-2, -1), v, scale=single), lambda q, k, v: _eager(q, k, v, scale=single))
    for bad in (math.inf, math.nan):  # NaN rows in eager, zeros in SDPA
        odd = torch.tensor([[[1.0]], [[bad]], [[0.5]]], dtype=torch.float64)
        _check(lambda q, k, v: attention_core(q, k.transpose(-2, -1), v, scale=odd), lambda q, k, v: _eager(q, k, v, scale=odd))
    big = torch.zeros(4, B, H, L, S, dtype=torch.float64)  # broadcasting makes the scores bigger: not SDPA's job
    _check(lambda q, k, v: attention_core(q, k.transpose(-2, -1), v, mask=big), lambda q, k, v: _eager(q, k, v, mask=big))
    assert not sdpa_calls


def test_dropout_module_training() -> None:
    drop = nn.Dropout(0.0)
    _check(lambda q, k, v: attention_core(q, k.transpose(-2, -1), v, scale=0.5, dropout=drop), lambda q, k, v: _eager(q, k, v, scale=0.5, drop=drop))
    drop = nn.Dropout(0.4)  # p > 0: the reference backend draws the same numbers as the original
    with use_backend("reference"):
        torch.manual_seed(3)
        new = lambda q, k, v: attention_core(q, k.transpose(-2, -1), v, scale=0.5, dropout=drop)  # noqa: E731
        outs = []
        for fn in (new, lambda q, k, v: _eager(q, k, v, scale=0.5, drop=drop)):
            torch.manual_seed(3)
            outs.append(fn(*_qkv()).detach())
        torch.testing.assert_close(outs[0], outs[1], rtol=1e-12, atol=1e-12)


def test_dropout_only_in_training(sdpa_calls: list[int]) -> None:
    drop = nn.Dropout(0.9).eval()
    _check(lambda q, k, v: attention_core(q, k.transpose(-2, -1), v, dropout=drop), lambda q, k, v: _eager(q, k, v, drop=drop))
    _check(
        lambda q, k, v: attention_core(q, k.transpose(-2, -1), v, dropout_p=0.9, training=False),
        lambda q, k, v: _eager(q, k, v),
    )
    assert len(sdpa_calls) == 2


def test_training_dropout_off_cuda_draws_the_original_sample(sdpa_calls: list[int]) -> None:
    drop = nn.Dropout(0.4)
    outs = []
    for fn in (
        lambda q, k, v: attention_core(q, k.transpose(-2, -1), v, scale=0.5, dropout=drop),
        lambda q, k, v: _eager(q, k, v, scale=0.5, drop=drop),
    ):
        torch.manual_seed(5)
        outs.append(fn(*_qkv()).detach())
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-12, atol=1e-12)
    assert not sdpa_calls


def test_dropout_with_hook_runs_the_reference(sdpa_calls: list[int]) -> None:
    drop = nn.Dropout(0.0)
    seen: list[int] = []
    drop.register_forward_hook(lambda *_: seen.append(1))
    _check(lambda q, k, v: attention_core(q, k.transpose(-2, -1), v, dropout=drop), lambda q, k, v: _eager(q, k, v, drop=drop))
    assert not sdpa_calls and len(seen) == 2


def test_reference_backend_never_calls_sdpa(sdpa_calls: list[int]) -> None:
    with use_backend("reference"):
        _check(lambda q, k, v: attention_core(q, k.transpose(-2, -1), v, scale=0.2), lambda q, k, v: _eager(q, k, v, scale=0.2))
    assert not sdpa_calls


def test_auto_on_cpu_runs_the_original_computation(sdpa_calls: list[int]) -> None:
    with use_backend("auto"):
        _check(lambda q, k, v: attention_core(q, k.transpose(-2, -1), v, scale=0.2), lambda q, k, v: _eager(q, k, v, scale=0.2))
    assert not sdpa_calls  # training (grads) and float64: the original computation


@pytest.mark.parametrize(
    ("shape", "grad", "dtype", "sdpa"),
    [
        ((4, 12, 96), False, torch.float32, True),  # the smallest size measured faster in float32 inference
        ((4, 12, 95), False, torch.float32, False),
        ((1, 12, 192), False, torch.float32, True),  # as many scores (4 x 96 x 96 = 192 x 192)
        ((1, 12, 128), False, torch.float32, False),  # within noise there (1.00x)
        ((4, 12, 192), True, torch.float32, True),  # training needs more
        ((4, 12, 128), True, torch.float32, False),
        ((4, 12, 512), False, torch.bfloat16, True),
        ((4, 12, 384), False, torch.bfloat16, False),
        ((4, 12, 1024), True, torch.bfloat16, False),  # bfloat16 training: slower at every length measured
        # many short rows (windowed attention): enough scores, but rows shorter than any measured faster
        ((2048, 2, 25), False, torch.float32, False),  # 0.69-1.00x at 25 keys (batch 1024-2048, 2 heads)
        ((1024, 2, 49), False, torch.float32, True),  # 1.10-1.23x at 49
        ((1024, 2, 49), True, torch.float32, False),  # training: 0.97-1.20x at 49
        ((1024, 2, 64), True, torch.float32, True),  # 1.11-1.15x at 64
        ((4096, 4, 48), False, torch.bfloat16, False),
        ((4096, 4, 49), False, torch.bfloat16, True),  # 1.67x at 49
        # float16: faster at every size measured (2.03-8.60x inference, 1.29-1.68x training), from the smallest
        ((4, 12, 16), False, torch.float16, True),
        ((4, 12, 16), True, torch.float16, True),
        ((1, 12, 16), False, torch.float16, False),  # below the smallest measured
        ((4096, 4, 15), True, torch.float16, False),  # rows shorter than any measured
    ],
    ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v),
)
def test_auto_on_cpu_takes_sdpa_from_the_measured_size(
    shape: tuple[int, int, int], grad: bool, dtype: torch.dtype, sdpa: bool
) -> None:
    """Measured on CPU (docs/KERNEL_PERFORMANCE.md, benchmarks/bench_attention_lengths.py): SDPA pays from a number
    of attention scores (batch x heads x queries x keys) that depends on the dtype and on training, and on rows of
    enough keys (many short rows of windowed attention do not make it pay). Stand-in tensors
    with the CPU flag check the size test without computing; the decision (which sees no shapes) must agree."""
    from types import SimpleNamespace

    from adopter_kernels import _dispatch
    from adopter_kernels.attention_core import _sdpa_pays

    batch, heads, keys = shape
    query = SimpleNamespace(is_cuda=False, is_cpu=True, dtype=dtype, shape=(batch, heads, keys, 64))
    with use_backend("auto"), torch.set_grad_enabled(grad):
        decided = _dispatch.select("attention_core", torch.zeros(1, dtype=dtype, requires_grad=grad))
        assert (decided == "sdpa" and _sdpa_pays(query, keys, grad)) is sdpa  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mask_shape", "keys", "sdpa"),
    [
        ((4, 1, 1, 96), 96, True),  # padding: the thresholds above
        ((1, 1, 96, 96), 96, True),  # causal
        ((12, 96, 96), 96, False),  # a relative position bias per head: 0.62-1.27x below 512 keys
        ((4, 12, 96, 96), 96, False),  # a full mask: per head too
        ((12, 512, 512), 512, True),  # 1.18-1.25x at 512
    ],
    ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v),
)
def test_auto_on_cpu_needs_longer_rows_for_a_mask_per_head(mask_shape: tuple[int, ...], keys: int, sdpa: bool) -> None:
    """SDPA with a mask that differs between heads measured slower on CPU below 512 keys in float32
    (gpu_bench/results/cpu-2026-11-28/attention_masks.txt), and faster at every length in float16
    (attention_masks_fp16_*.txt); padding and causal masks keep the score threshold."""
    from types import SimpleNamespace

    from adopter_kernels.attention_core import _sdpa_pays

    mask = torch.zeros(1).expand(mask_shape)  # the shape only: the size test reads no data
    for dtype, expected in ((torch.float32, sdpa), (torch.float16, True)):
        query = SimpleNamespace(is_cuda=False, is_cpu=True, dtype=dtype, shape=(4, 12, keys, 64))
        with use_backend("auto"):
            assert _sdpa_pays(query, keys, False, mask) is expected, dtype  # type: ignore[arg-type]


@pytest.mark.parametrize("per_head_bias", [False, True], ids=["no-mask", "per-head-bias"])
def test_auto_on_cpu_runs_float16_through_sdpa_and_agrees(per_head_bias: bool, sdpa_calls: list[int]) -> None:
    """float16 on CPU, inference and training, from 4 x 12 heads x 16 keys, with a relative position bias per head
    too: SDPA, within float16 rounding of the eager core computed in float32."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(4, 12, 16, 8, generator=g) for _ in range(3))
    bias = torch.randn(12, 16, 16, generator=g) if per_head_bias else None
    expected = _eager(q, k, v, scale=0.25, mask=bias)
    for grad in (False, True):
        half = [t.half().requires_grad_(grad) for t in (q, k, v)]
        with use_backend("auto"), torch.set_grad_enabled(grad):
            out = attention_core(half[0], half[1].transpose(-2, -1), half[2], scale=0.25,
                                 mask=None if bias is None else bias.half())
        assert out.dtype == torch.float16
        torch.testing.assert_close(out.float(), expected, rtol=1e-2, atol=1e-2)
        if grad:
            out.float().sum().backward()
            assert all(t.grad is not None and bool(torch.isfinite(t.grad).all()) for t in half)
    assert len(sdpa_calls) == 2


def test_auto_on_cpu_runs_sdpa_above_the_size_and_agrees(sdpa_calls: list[int]) -> None:
    """A real call at 4 x 12 heads x 96 keys in float32 inference takes SDPA and matches the eager core."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(4, 12, 96, 16, generator=g, dtype=torch.float32) for _ in range(3))
    with use_backend("auto"), torch.no_grad():
        out = attention_core(q, k.transpose(-2, -1), v, scale=0.25)
    assert sdpa_calls
    torch.testing.assert_close(out, _eager(q, k, v, scale=0.25), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("shape", "grad", "dtype", "forced", "sdpa"),
    [
        ((8, 12, 512), False, torch.float32, False, True),  # float32 inference: 1.13x at 512 keys, 0.95x at 384
        ((8, 12, 384), False, torch.float32, False, False),
        ((2, 12, 1024), False, torch.float32, False, True),  # as many scores as 8 x 512 x 512
        ((8, 12, 512), True, torch.float32, False, False),  # float32 training: 0.93x at 512, 1.04x at 768
        ((8, 12, 768), True, torch.float32, False, True),
        ((8, 12, 512), False, torch.bfloat16, False, False),  # bfloat16: 0.96x at 512, 1.90x at 768
        ((8, 12, 768), False, torch.bfloat16, False, True),
        ((8, 12, 768), True, torch.bfloat16, False, True),
        ((1, 12, 1024), True, torch.bfloat16, False, False),  # 1024 keys alone no longer decide: too few scores
        ((64, 12, 256), False, torch.float32, False, False),  # enough scores; rows shorter than any measured faster
        ((64, 12, 512), False, torch.float32, False, True),
        ((64, 12, 512), False, torch.bfloat16, False, False),
        ((8, 12, 128), False, torch.float32, True, True),  # a forced sdpa takes any size
    ],
    ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v),
)
def test_on_cuda_auto_takes_sdpa_from_the_measured_size(
    shape: tuple[int, int, int], grad: bool, dtype: torch.dtype, forced: bool, sdpa: bool
) -> None:
    """Measured on an H200 (gpu_bench/results/h200-2026-11-28/attention_lengths*.txt, docs/KERNEL_PERFORMANCE.md):
    SDPA pays from 8x12x512x512 scores in float32 inference and from 8x12x768x768 in training and in bfloat16, with
    rows of at least the keys measured (512, 768). Stand-in tensors with the CUDA flag check the size test without
    a GPU."""
    from types import SimpleNamespace

    from adopter_kernels.attention_core import _sdpa_pays

    batch, heads, keys = shape
    query = SimpleNamespace(is_cuda=True, is_cpu=False, dtype=dtype, shape=(batch, heads, keys, 64))
    with use_backend("attention_core=sdpa" if forced else "auto"):
        assert _sdpa_pays(query, keys, grad) is sdpa  # type: ignore[arg-type]


def test_exported() -> None:
    assert adopter_kernels.attention_core is attention_core


# --- the softmax as a layer (ADP010's nn.Softmax(dim=-1) variants) ----------------------------------------
# ADP010 with the softmax written as a layer (`self.attend = nn.Softmax(dim=-1)`, vit-pytorch's Attention): the
# rewritten call passes the layer (`attention_core(..., softmax=self.attend)`). The reference path calls it, so hooks
# fire and whatever the attribute holds at run time is what runs; SDPA only for a plain nn.Softmax over the last dim
# that nothing observes. float64, CPU, the SDPA backend forced (CUDA's `auto`).


def _eager_module(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attend: nn.Module, drop: Optional[nn.Module] = None,
    scale: float = 0.5, bmm: bool = False,
) -> torch.Tensor:
    """vit-pytorch's core as written: `attn = self.attend(dots); attn = self.dropout(attn); out = attn @ v`."""
    matmul = torch.bmm if bmm else torch.matmul
    dots = matmul(q, k.transpose(-1, -2)) * scale
    attn = attend(dots)
    if drop is not None:
        attn = drop(attn)
    return matmul(attn, v)


def _fused(attend: nn.Module, drop: Optional[nn.Module] = None, bmm: bool = False) -> Callable[..., torch.Tensor]:
    return lambda q, k, v: attention_core(q, k.transpose(-1, -2), v, scale=0.5, softmax=attend, dropout=drop,
                                          batched=bmm)


@pytest.mark.parametrize("dim", [-1, 3])
def test_plain_last_dim_softmax_runs_sdpa(dim: int, sdpa_calls: list[int]) -> None:
    attend, drop = nn.Softmax(dim=dim), nn.Dropout(0.1).eval()
    _check(_fused(attend, drop), lambda q, k, v: _eager_module(q, k, v, attend, drop))
    assert len(sdpa_calls) == 1


def test_batched_form_with_a_softmax_module(sdpa_calls: list[int]) -> None:
    attend = nn.Softmax(dim=2)  # the last dim of 3-D scores
    _check(_fused(attend, bmm=True), lambda q, k, v: _eager_module(q, k, v, attend, bmm=True), rank=3)
    assert len(sdpa_calls) == 1


@pytest.mark.parametrize(
    "attend",
    [nn.Softmax(dim=1), nn.Softmax(), nn.Softmax(dim=2), nn.Identity(), nn.LogSoftmax(dim=-1)],
    ids=["dim=1", "dim=None", "dim=2", "Identity", "LogSoftmax"],
)
def test_anything_else_runs_the_module(attend: nn.Module, sdpa_calls: list[int]) -> None:
    """What the attribute holds at run time is what runs (another binding in __init__, `m.attend = ...` from
    outside, a changed dim): the reference path calls it."""
    with pytest.warns(UserWarning) if isinstance(attend, nn.Softmax) and attend.dim is None else contextlib.nullcontext():
        _check(_fused(attend), lambda q, k, v: _eager_module(q, k, v, attend))
    assert not sdpa_calls


class _Temperature(nn.Softmax):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return F.softmax(input / 2.0, self.dim)


def test_subclass_overriding_forward_runs_the_module(sdpa_calls: list[int]) -> None:
    attend = _Temperature(dim=-1)
    _check(_fused(attend), lambda q, k, v: _eager_module(q, k, v, attend))
    assert not sdpa_calls


def test_hooked_softmax_runs_the_module_and_its_hooks(sdpa_calls: list[int]) -> None:
    """vit-pytorch's Recorder registers a forward hook on `attend` to record the attention maps."""
    recorded: list[torch.Tensor] = []
    attend = nn.Softmax(dim=-1)
    attend.register_forward_hook(lambda _m, _i, out: recorded.append(out.detach().clone()))
    _check(_fused(attend), lambda q, k, v: _eager_module(q, k, v, attend))
    assert not sdpa_calls and len(recorded) == 2
    torch.testing.assert_close(recorded[0], recorded[1], rtol=0, atol=0)
    # a hook that changes the output is honoured too
    attend.register_forward_hook(lambda _m, _i, out: out * 0.5)
    _check(_fused(attend), lambda q, k, v: _eager_module(q, k, v, attend))
    assert not sdpa_calls


def test_softmax_module_under_the_reference_backend(sdpa_calls: list[int]) -> None:
    attend = nn.Softmax(dim=-1)
    with use_backend("reference"):
        _check(_fused(attend), lambda q, k, v: _eager_module(q, k, v, attend))
    assert not sdpa_calls


# --- both products written with torch.einsum (ADP010's einsum variants) ---------------------------------------
# vit-pytorch's `einsum('b h i d, b h j d -> b h i j', q, k)` ... `einsum('b h i j, b h j d -> b h i d', attn, v)`:
# the call passes the equations and the key as written. The reference path runs those einsums; SDPA only where both
# are batched matrix products over the same leading dims.

MATMUL_EQUATIONS = {
    "letters": ("b h i d, b h j d -> b h i j", "b h i j, b h j d -> b h i d", 4),
    "no spaces, other letters": ("bhqc,bhkc->bhqk", "bhqk,bhkc->bhqc", 4),
    "ellipsis": ("... i d, ... j d -> ... i j", "... i j, ... j d -> ... i d", 4),
    "three dims": ("b i d, b j d -> b i j", "b i j, b j d -> b i d", 3),
}


def _eager_einsum(score_equation: str, output_equation: str, **kw: Any) -> Callable[..., torch.Tensor]:
    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        dots = torch.einsum(score_equation, q, k) * kw.get("scale", 1.0)
        if "masked_inf" in kw:
            dots = dots.masked_fill(kw["masked_inf"], float("-inf"))
        attend = kw.get("softmax")
        attn = attend(dots) if attend is not None else dots.softmax(dim=-1)
        return torch.einsum(output_equation, attn, v)

    return run


def _fused_einsum(score_equation: str, output_equation: str, **kw: Any) -> Callable[..., torch.Tensor]:
    return lambda q, k, v: attention_core(
        q, k, v, scale=kw.get("scale", 1.0), masked_inf=kw.get("masked_inf"), softmax=kw.get("softmax"),
        score_equation=score_equation, output_equation=output_equation,
    )


@pytest.mark.parametrize("name", list(MATMUL_EQUATIONS))
def test_einsum_matrix_products_take_sdpa(name: str, sdpa_calls: list[int]) -> None:
    score_eq, output_eq, rank = MATMUL_EQUATIONS[name]
    for kw in ({"scale": 0.5}, {"scale": 0.5, "masked_inf": _causal_masked()[0] if rank == 3 else _causal_masked()},
               {"softmax": nn.Softmax(dim=-1)}):
        sdpa_calls.clear()
        _check(_fused_einsum(score_eq, output_eq, **kw), _eager_einsum(score_eq, output_eq, **kw), rank=rank)
        assert sdpa_calls, kw


def _as_query_length(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return q, k[..., :L, :], v[..., :L, :]


@pytest.mark.parametrize(
    "score_eq, output_eq, prepare",
    [
        # the scores transposed (keys by queries): the softmax runs over the queries
        ("b h i d, b h j d -> b h j i", "b h j i, b h i d -> b h j d", _as_query_length),
        # the key's leading dims in another order
        ("b h i d, h b j d -> b h i j", "b h i j, b h j d -> b h i d", lambda q, k, v: (q, k.transpose(0, 1), v)),
        # the output's heads moved after the queries
        ("b h i d, b h j d -> b h i j", "b h i j, b h j d -> b i h d", lambda q, k, v: (q, k, v)),
    ],
    ids=["scores-transposed", "key-dims-permuted", "output-heads-moved"],
)
def test_other_einsums_run_the_reference(
    score_eq: str, output_eq: str, prepare: Callable[..., tuple[torch.Tensor, ...]], sdpa_calls: list[int]
) -> None:
    fused, eager = _fused_einsum(score_eq, output_eq, scale=0.5), _eager_einsum(score_eq, output_eq, scale=0.5)
    _check(lambda *t: fused(*prepare(*t)), lambda *t: eager(*prepare(*t)))
    assert not sdpa_calls


def test_einsum_with_a_key_shared_across_heads_runs_the_reference(sdpa_calls: list[int]) -> None:
    """vit-pytorch's simple_flash_attn_vit: `einsum('b h i d, b j d -> b h i j', q, k)`, one key for all heads."""
    score_eq, output_eq = "b h i d, b j d -> b h i j", "b h i j, b j d -> b h i d"
    q, k, v = _qkv()
    k3, v3 = k[:, 0].detach().requires_grad_(), v[:, 0].detach().requires_grad_()
    fused = attention_core(q, k3, v3, scale=0.5, score_equation=score_eq, output_equation=output_eq)
    torch.testing.assert_close(fused, _eager_einsum(score_eq, output_eq, scale=0.5)(q, k3, v3), rtol=0, atol=0)
    assert not sdpa_calls


def test_einsum_naming_fewer_dims_than_the_query_raises_like_einsum(sdpa_calls: list[int]) -> None:
    q, k, v = _qkv()
    with pytest.raises(RuntimeError):
        attention_core(q, k, v, score_equation="b i d, b j d -> b i j", output_equation="b i j, b j d -> b i d")
    assert not sdpa_calls


def test_einsum_under_the_reference_backend_is_the_einsums_exactly(sdpa_calls: list[int]) -> None:
    score_eq, output_eq, _ = MATMUL_EQUATIONS["letters"]
    q, k, v = _qkv()
    with use_backend("reference"):
        fused = _fused_einsum(score_eq, output_eq, scale=0.5)(q, k, v)
    torch.testing.assert_close(fused, _eager_einsum(score_eq, output_eq, scale=0.5)(q, k, v), rtol=0, atol=0)
    assert not sdpa_calls
