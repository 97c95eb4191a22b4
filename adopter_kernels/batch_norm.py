"""ADP007/ADP008 runtime: Conv2d→BatchNorm2d and Linear→BatchNorm1d with BN folded in eval.

``conv_bn2d(x, conv, bn)`` = ``bn(conv(x))`` and ``linear_bn1d(x, linear, bn)`` = ``bn(linear(x))``.

* Training (``bn.training``), BN without running stats, any module that is not exactly ``nn.Conv2d`` /
  ``nn.Linear`` / ``nn.BatchNorm2d`` / ``nn.BatchNorm1d`` (subclasses included: ``type(m) is``, since a
  subclass may change what it computes without overriding ``forward``), modules with forward or backward
  hooks (module or global: the fused path would skip them), ``linear_bn1d`` on input that is not
  (N, C_in): the unfused composition ``bn(conv(x))``, literally (batch statistics, running-stat updates,
  errors all as in the original). So the ops equal the original for ANY two modules, which is what a
  *guarded* rewrite relies on (the codemod could not tell the layers' types, docs/DESIGN.md §4).
* Eval with running stats: one conv/linear with folded weights, ``w' = w * s``, ``b' = (b - mean) * s + beta``,
  ``s = gamma / sqrt(var + eps)``. The arithmetic mirrors ``torch.nn.utils.fusion.fuse_conv_bn_weights`` /
  ``fuse_linear_bn_weights`` op for op (bit-identical folded weights) but returns plain tensors, because
  those helpers wrap the result in a new ``nn.Parameter`` and so cut the autograd graph.
* Folded weights are cached (see ``_cache``) and recomputed when any source tensor changes (optimizer
  step, ``load_state_dict``, ``.to()``). When grad mode is on and a source requires grad (e.g. fine-tuning
  a model with frozen BN statistics) they are recomputed on every call so gradients reach conv/linear
  weights and BN affine parameters.

For 3-D input (N, C, L) BatchNorm1d normalises dim 1 while the Linear maps the last dim, so folding
does not apply and ``linear_bn1d`` stays unfused.

``FusedSequential`` is an ``nn.Sequential`` (same constructors, children, indexing and state-dict keys)
whose forward routes adjacent Conv2d→BatchNorm2d and Linear→BatchNorm1d children through these ops (which
check the exact types again) and calls every other child as ``nn.Sequential.forward`` does.
"""

from __future__ import annotations

from typing import Optional, Tuple, Type, Union

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from ._cache import cached, needs_grad
from ._dispatch import Backend, is_exact, register_kernel, select

__all__ = ["conv_bn2d", "linear_bn1d", "FusedSequential", "fold_bn"]

# Folding is only attempted for eval-mode BN with running statistics (checked in the ops). On CPU it measured no
# faster than conv/linear + BN (benchmarks/bench_kernels.py, docs/KERNEL_PERFORMANCE.md): the original runs there.
FOLDED = Backend(
    "folded",
    "CUDA, eval-mode BN with running stats (one conv/linear instead of two ops; not yet measured on a GPU). "
    "CPU: measured no faster (float32 and bfloat16), so the original runs",
    faster=lambda call: call.device == "cuda",
)
register_kernel("conv_bn2d", FOLDED, doc="ADP007 bn(conv(x)); BN folded into the conv weights in eval")
register_kernel("linear_bn1d", FOLDED, doc="ADP008 bn(linear(x)); BN folded into the linear weights in eval")


def fold_bn(
    weight: torch.Tensor, bias: Optional[torch.Tensor], bn: _BatchNorm
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Fold eval-mode ``bn`` into a conv (4-D) or linear (2-D) ``weight``/``bias``; differentiable."""
    rm, rv = bn.running_mean, bn.running_var
    assert rm is not None and rv is not None
    weight_dtype = weight.dtype
    bias_dtype = bias.dtype if bias is not None else weight_dtype
    if bias is None:
        bias = torch.zeros_like(rm)
    bn_w = bn.weight if bn.weight is not None else torch.ones_like(rm)
    bn_b = bn.bias if bn.bias is not None else torch.zeros_like(rm)
    if weight.dim() == 2:  # fuse_linear_bn_weights' order of operations
        scale = bn_w * torch.rsqrt(rv + bn.eps)
        fused_w = weight * scale.unsqueeze(-1).to(dtype=weight_dtype)
        fused_b = ((bias - rm) * scale + bn_b).to(dtype=bias_dtype)
        return fused_w, fused_b
    var_rsqrt = torch.rsqrt(rv + bn.eps)  # fuse_conv_bn_weights' order of operations
    shape = [-1] + [1] * (weight.dim() - 1)
    fused_w = (weight * (bn_w * var_rsqrt).reshape(shape)).to(dtype=weight_dtype)
    fused_b = ((bias - rm) * var_rsqrt * bn_w + bn_b).to(dtype=bias_dtype)
    return fused_w, fused_b


def _folded(layer: Union[nn.Conv2d, nn.Linear], bn: _BatchNorm) -> Tuple[torch.Tensor, torch.Tensor]:
    sources = (layer.weight, layer.bias, bn.weight, bn.bias, bn.running_mean, bn.running_var)
    if needs_grad(sources):
        return fold_bn(layer.weight, layer.bias, bn)
    return cached(layer, sources, (id(bn), bn.eps), lambda: fold_bn(layer.weight, layer.bias, bn))


def _foldable(bn: _BatchNorm, cls: Type[_BatchNorm]) -> bool:
    """Eval-mode BN that normalises with its running statistics (the only case folding is exact)."""
    return (
        is_exact(bn, cls)
        and not bn.training
        and bn.running_mean is not None
        and bn.running_var is not None
    )


def conv_bn2d(input: torch.Tensor, conv: nn.Conv2d, bn: nn.BatchNorm2d) -> torch.Tensor:
    """``bn(conv(input))``: exact in training, one conv with BN-folded weights in eval."""
    if (
        input.dim() == 4  # BatchNorm2d rejects the 3-D output of an unbatched conv: keep that error
        and _foldable(bn, nn.BatchNorm2d)
        and is_exact(conv, nn.Conv2d)
        and conv.out_channels == bn.num_features
        and select("conv_bn2d", input, conv.weight) == "folded"
    ):
        weight, bias = _folded(conv, bn)
        # _conv_forward is what Conv2d.forward calls: it handles every padding_mode, groups, dilation.
        return conv._conv_forward(input, weight, bias)
    return bn(conv(input))


def linear_bn1d(input: torch.Tensor, linear: nn.Linear, bn: nn.BatchNorm1d) -> torch.Tensor:
    """``bn(linear(input))``: exact in training, one linear with BN-folded weights in eval on (N, C) input."""
    if (
        input.dim() == 2
        and _foldable(bn, nn.BatchNorm1d)
        and is_exact(linear, nn.Linear)
        and linear.out_features == bn.num_features
        and select("linear_bn1d", input, linear.weight) == "folded"
    ):
        weight, bias = _folded(linear, bn)
        return F.linear(input, weight, bias)
    return bn(linear(input))


# FusedSequential calls these through this module's globals: fx leaves here too (see adopter_kernels/__init__.py).
torch.fx.wrap("conv_bn2d")
torch.fx.wrap("linear_bn1d")


class FusedSequential(nn.Sequential):
    """``nn.Sequential`` that runs Conv2d→BatchNorm2d and Linear→BatchNorm1d pairs fused (see module doc)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        modules = list(self._modules.values())
        i = 0
        while i < len(modules):
            module, following = modules[i], modules[i + 1] if i + 1 < len(modules) else None
            if isinstance(module, nn.Conv2d) and isinstance(following, nn.BatchNorm2d):
                input = conv_bn2d(input, module, following)
                i += 2
            elif isinstance(module, nn.Linear) and isinstance(following, nn.BatchNorm1d):
                input = linear_bn1d(input, module, following)
                i += 2
            else:
                input = module(input)
                i += 1
        return input
