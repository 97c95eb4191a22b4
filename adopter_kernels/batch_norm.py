"""ADP007/ADP008 runtime: Conv2d→BatchNorm2d and Linear→BatchNorm1d with BN folded in eval.

``conv_bn2d(x, conv, bn)`` = ``bn(conv(x))`` and ``linear_bn1d(x, linear, bn)`` = ``bn(linear(x))`` for ANY two
modules, which is what a *guarded* rewrite relies on (the codemod could not tell the layers' types,
docs/DESIGN.md §4). The folded path runs only where it is provably the same function:

* the conv/linear is an ``nn.Conv2d`` / ``nn.Linear`` whose class keeps ``forward``, ``_conv_forward``, ``__call__``
  and ``_call_impl`` (a subclass may change what it computes without overriding ``forward``: weight
  standardisation in ``_conv_forward``); a parametrized weight is read through the parametrization as the
  forward reads it;
* the norm is an eval-mode ``nn.BatchNorm2d`` / ``nn.BatchNorm1d`` with running statistics whose class keeps
  ``forward``, ``_check_input_dim`` and the call machinery; or (conv_bn2d) a BatchNorm2d subclass listed in
  ``_BN_THEN_CHILDREN`` whose forward has the verified text (timm's ``BatchNormAct2d``: BN, then its ``drop`` and
  ``act`` children, which are then called as modules after the folded conv);
* neither module has forward or backward hooks (module or global: the fused path would skip them), and
  ``linear_bn1d``'s input is (N, C_in).

Everything else (training, BN without running stats, GroupNorm, Identity, FrozenBatchNorm2d, Conv2dSame, hooks,
...) runs the unfused composition ``bn(conv(x))``, literally (batch statistics, running-stat updates, errors all as
in the original).

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
check the modules again), a Linear followed by an activation the bias+activation kernel recognises through
``linear_bias_activation`` (ADP006: ``nn.Sequential(nn.Linear(d, h), nn.GELU(), ...)`` MLPs; it checks the Linear
again and computes ``act(linear(x))`` otherwise), and calls every other child as ``nn.Sequential.forward`` does.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import textwrap
import tokenize
from typing import Callable, Dict, FrozenSet, List, Optional, Tuple, Type, Union, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from ._cache import cached, needs_grad
from .activation import classify_activation, linear_bias_activation
from ._dispatch import Backend, is_plain, parametrized, reference_only, register_kernel, select, unobserved

__all__ = ["conv_bn2d", "linear_bn1d", "FusedSequential", "fold_bn"]

# Folding is only attempted for eval-mode BN with running statistics (checked in the ops). It measured no faster
# than conv/linear + BN on CPU, and no faster or slower (0.90-1.00x in inference) on an H200
# (benchmarks/bench_kernels.py, docs/KERNEL_PERFORMANCE.md): auto runs the original everywhere.
FOLDED = Backend(
    "folded",
    "nowhere: measured no faster than conv/linear + BN on CPU and on an H200 (0.90-1.00x in inference); "
    "ADOPTER_KERNELS_BACKEND=conv_bn2d=folded,linear_bn1d=folded forces it (eval-mode BN with running stats)",
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
    # A training forward updates the running statistics in place without bumping their version counters (the
    # native kernel writes them); nn.BatchNorm's forward bumps num_batches_tracked's, which the key then reads.
    return cached(
        layer, (*sources, bn.num_batches_tracked), (id(bn), bn.eps), lambda: fold_bn(layer.weight, layer.bias, bn)
    )


# BatchNorm subclasses whose forward, in eval with running statistics, is exactly BatchNorm's followed by calls of
# some of its child modules: (module, qualified name of the forward) -> (the children's attribute names in call
# order, the fingerprints of the forward's text this was verified on, see ``_fingerprint``). A forward whose text
# differs (another version of the library, a patched class) is not folded: the module's own forward runs.
_BN_THEN_CHILDREN: Dict[Tuple[str, str], Tuple[Tuple[str, ...], FrozenSet[str]]] = {
    # timm's BatchNormAct2d (verified on timm 1.0.31): F.batch_norm with the running statistics in eval, then
    # self.drop, then self.act. Proof: tests/test_kernel_guarded_conv_bn.py (float64, eval and train, gradients).
    ("timm.layers.norm_act", "BatchNormAct2d.forward"): (
        ("drop", "act"),
        frozenset({"4c9877d1bff1f1b3273d3677ccc6858f40008531676f7c9201878f57a3cab026"}),
    ),
}
# Per forward function: the children it applies after the batch norm, or None when it is not known to be one.
_CHILDREN_OF: Dict[Callable[..., object], Optional[Tuple[str, ...]]] = {}


def _fingerprint(function: Callable[..., object]) -> Optional[str]:
    """SHA-256 of the tokens of ``function``'s source, None without source. Comments, blank lines and the width
    of indentation are ignored; an f-string counts as one string token, as Python < 3.12 tokenizes it (3.12
    splits it into parts), so a fingerprint does not depend on the Python version."""
    try:
        source = textwrap.dedent(inspect.getsource(function))
        lines = source.splitlines(keepends=True)
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line))
        tokens: List[Tuple[str, str]] = []
        fstring_start, depth = 0, 0
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            kind = tokenize.tok_name[token.type]
            if kind == "FSTRING_START":
                if depth == 0:
                    fstring_start = offsets[token.start[0] - 1] + token.start[1]
                depth += 1
            elif kind == "FSTRING_END":
                depth -= 1
                if depth == 0:
                    tokens.append(("STRING", source[fstring_start:offsets[token.end[0] - 1] + token.end[1]]))
            elif depth == 0 and kind not in ("COMMENT", "NL"):
                tokens.append((kind, "" if kind == "INDENT" else token.string))
    except (OSError, TypeError, tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return hashlib.sha256(repr(tokens).encode()).hexdigest()


def _children_after_bn(forward: Callable[..., object]) -> Optional[Tuple[str, ...]]:
    if forward not in _CHILDREN_OF:
        known = _BN_THEN_CHILDREN.get((getattr(forward, "__module__", ""), getattr(forward, "__qualname__", "")))
        _CHILDREN_OF[forward] = known[0] if known is not None and _fingerprint(forward) in known[1] else None
    return _CHILDREN_OF[forward]


# torch.compile calls it once while compiling (a class's forward is a constant there) and keeps the answer, as
# torch.compiler.assume_constant_result would (see _dispatch._decision): reading source is no graph op.
_children_after_bn._dynamo_marked_constant = True  # type: ignore[attr-defined]


def _foldable(bn: nn.Module, cls: Type[_BatchNorm]) -> Optional[Tuple[str, ...]]:
    """For an eval-mode ``cls`` that normalises with its running statistics (the only case folding is exact):
    the names of the child modules its forward applies to the normalised tensor (``()`` for ``cls`` itself).
    None when ``bn`` is anything else, or a subclass whose forward is not known to be BN followed by children."""
    if (
        not isinstance(bn, cls)
        or bn.training
        or bn.running_mean is None
        or bn.running_var is None
    ):
        return None
    if is_plain(bn, cls, "_check_input_dim"):
        return ()
    kind = type(bn)
    if kind.__call__ is not nn.Module.__call__ or kind._call_impl is not nn.Module._call_impl or not unobserved(bn):
        return None
    return _children_after_bn(kind.forward)


def _conv_bn2d_folded(
    input: torch.Tensor, conv: nn.Conv2d, bn: nn.BatchNorm2d, children: Tuple[str, ...]
) -> torch.Tensor:
    """The fused path of ``conv_bn2d``: one conv with BN-folded weights, then the BN's children (if any)."""
    weight, bias = _folded(conv, bn)
    # _conv_forward is what Conv2d.forward calls: it handles every padding_mode, groups, dilation.
    output = conv._conv_forward(input, weight, bias)
    for name in children:
        output = getattr(bn, name)(output)
    return output


def conv_bn2d(input: torch.Tensor, conv: nn.Module, bn: nn.Module) -> torch.Tensor:
    """``bn(conv(input))`` for any modules; one conv with BN-folded weights where that is provably the same
    function: eval-mode BatchNorm2d with running statistics after a Conv2d, neither overridden nor hooked."""
    if (
        isinstance(input, torch.Tensor)
        and input.dim() == 4  # BatchNorm2d rejects the 3-D output of an unbatched conv: keep that error
        # the decisions before the module checks: where auto runs the original, nothing else is paid
        and not reference_only("conv_bn2d")
        and not parametrized(conv, bn)  # no read of a weight computed on every read: the modules read it
        and select("conv_bn2d", input, getattr(conv, "weight", None)) == "folded"
        and is_plain(conv, nn.Conv2d, "_conv_forward")
    ):
        conv2d, children = cast(nn.Conv2d, conv), _foldable(bn, nn.BatchNorm2d)
        if children is not None:
            norm = cast(nn.BatchNorm2d, bn)
            if conv2d.out_channels == norm.num_features:
                return _conv_bn2d_folded(input, conv2d, norm, children)
    return bn(conv(input))


def linear_bn1d(input: torch.Tensor, linear: nn.Module, bn: nn.Module) -> torch.Tensor:
    """``bn(linear(input))`` for any modules; one linear with BN-folded weights on (N, C) input where that is
    provably the same function: eval-mode BatchNorm1d with running statistics after a Linear, neither
    overridden nor hooked."""
    if (
        isinstance(input, torch.Tensor)
        and input.dim() == 2
        and not reference_only("linear_bn1d")  # the decisions first: cheapest
        and not parametrized(linear, bn)  # no read of a weight computed on every read: the modules read it
        and select("linear_bn1d", input, getattr(linear, "weight", None)) == "folded"
        and is_plain(linear, nn.Linear)
        and _foldable(bn, nn.BatchNorm1d) == ()
    ):
        dense, norm = cast(nn.Linear, linear), cast(nn.BatchNorm1d, bn)
        if dense.out_features == norm.num_features:
            weight, bias = _folded(dense, norm)
            return F.linear(input, weight, bias)
    return bn(linear(input))


# Not torch.fx leaves: under symbolic tracing the input is a Proxy, not a tensor, so both ops record
# ``bn(conv(x))`` / ``bn(linear(x))`` as call_module nodes, which is the original model's graph, node names included
# (torchvision's create_feature_extractor asks for nodes such as "layer1.0.bn1"; fx quantization and
# torch.fx.experimental.optimization.fuse look for Conv2d -> BatchNorm2d modules). docs/COMPILE_AND_TRACE.md.


class FusedSequential(nn.Sequential):
    """``nn.Sequential`` that runs Conv2d→BatchNorm2d and Linear→BatchNorm1d pairs fused (see module doc), and
    Linear→activation pairs through ``linear_bias_activation`` (ADP006)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        if reference_only("conv_bn2d", "linear_bn1d", "linear_bias_activation"):
            # every pair would run its original computation: nn.Sequential's loop, without this one's tests
            for module in self:
                input = module(input)
            return input
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
            elif (
                isinstance(module, nn.Linear)
                and isinstance(following, nn.Module)
                and isinstance(input, torch.Tensor)  # symbolic tracing records the two children's calls
                and classify_activation(following) is not None
            ):
                input = linear_bias_activation(input, module, following)
                i += 2
            else:
                input = module(input)
                i += 1
        return input
