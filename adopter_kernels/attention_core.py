"""ADP010: a hand-written attention core as one call, ``F.scaled_dot_product_attention`` where provably the same.

What: ``attention_core(query, key_t, value, ...)`` computes, in this order, exactly what the rewritten code wrote::

    scores = query @ key_t          # key_t: the key as the code transposed it, [..., E, S]; torch.bmm if batched
    scores = scores * scale         # if given (given as None, it raises TypeError, as ``scores * None`` does)
    scores = scores / divisor                                         # if given (idem)
    scores = scores + mask                                            # if given (additive mask, relative bias, ...)
    scores = scores.masked_fill(masked_inf, float("-inf"))            # if given
    scores = scores.masked_fill(masked_min, torch.finfo(scores.dtype).min)  # if given
    probs = softmax(scores, dim=-1) # or the code's nn.Softmax(dim=-1) module, called: softmax(scores)
    probs = dropout(probs)          # an nn.Dropout module, if given
    probs = F.dropout(probs, dropout_p, training)                     # if given (the functional form)
    return probs @ value            # torch.bmm if batched

Where the code wrote the scale, divisor or mask step in place (``scores *= scale``, ``scores += mask``), the call
passes ``scale_in_place=True`` (``divisor_in_place``, ``mask_in_place``) and that step runs in place here too
(``scores.mul_(scale)``...): the scores keep their dtype, as the code's did (bfloat16 scores plus a float32 mask stay
bfloat16 in place, become float32 out of place). The fast path below takes only a Python-number scale and a mask of
the scores' dtype, where both forms agree.

The key is passed as the code transposed it, so any transpose the original wrote (``k.transpose(-1, -2)``,
``k.transpose(1, 2)`` of a 3-D tensor, ...) is reproduced as written; the fast path transposes it back.

Where the code wrote both products with ``torch.einsum`` (vit-pytorch's ``einsum('b h i d, b h j d -> b h i j', q,
k)`` and ``einsum('b h i j, b h j d -> b h i d', attn, v)``), the call passes the two equations
(``score_equation``, ``output_equation``) and the key as the code passed it: the products are those ``einsum``
calls, as written. The fast path takes only equations that are batched matrix products with the batch dims first
and in one order, ``A i d, A j d -> A i j`` then ``A i j, A j d -> A i d`` (``A``: distinct letters, possibly after
``...``); others (a key shared across heads, ``b h i d, b j d -> b h i j``) always run the reference path.

Reference path (``ADOPTER_KERNELS_BACKEND=reference``, and every input the fast path does not take): the code
above, op for op, so it is the original computation (same rounding, same random numbers for dropout).

Fast path (under ``auto`` where it measured faster, see Dispatch below; any device when forced):
``F.scaled_dot_product_attention(query, key_t.transpose(-2, -1), value, attn_mask, ...)``, only where it
computes the same function up to rounding:

- query, key and value of one floating dtype, the same rank (3 or 4) and the same leading (batch/head) dims, no
  autocast (autocast runs eager's softmax in float32, SDPA in its own way);
- the scale a Python number (``scale``, ``1 / divisor`` or ``scale / divisor``), or a scale tensor of the query's
  dtype (float32, bfloat16 or float64: in float16 ``query * scale`` may overflow where the scores times the scale
  would not) with one number per query row or fewer (its last dim 1, as timm's SwinV2 per-head
  ``logit_scale.exp()`` of shape [H, 1, 1]; a divisor then a Python number) and every number finite, which scales
  the query instead: ``(query * scale) @ key_t`` is ``(query @ key_t) * scale`` up to rounding;
- an additive ``mask`` of the query's dtype whose broadcast with the scores is the scores' shape, whose values
  are all finite and where every row keeps a key (an entry >= -1e4): HF's padding/causal ``finfo.min`` masks
  qualify. A row that keeps no key (a fully padded query, a row of ``-inf``) is uniform or NaN in eager, and SDPA
  gives zeros (``-inf``) or the same output with another gradient (measured on torch 2.13: a row of ``finfo.min``
  or ``-1e20`` entries in float64): such inputs run the reference path;
- boolean ``masked_inf``/``masked_min`` (not both) broadcasting to the scores' shape, where every row keeps at
  least one key (checked on the data): masked keys get probability 0 in both; a fully masked row (NaN or uniform
  in eager) runs the reference path;
- a softmax module (``softmax=self.attend``, the code's ``nn.Softmax(dim=-1)`` layer): a plain ``nn.Softmax``
  (no hooks, forward not overridden) whose ``dim`` is still the last dim; anything else (a hook recording the
  attention maps, as vit-pytorch's ``Recorder`` registers on ``attend``, another module bound to the attribute,
  ``dim`` changed) runs the reference path, which calls the module. It may be the code's ``nn.Sequential`` of that
  softmax and a dropout layer (vit-pytorch's MaxViT: ``nn.Sequential(nn.Softmax(dim=-1), nn.Dropout(p))``, called as
  one layer): a plain ``nn.Sequential`` of a plain softmax as above, then at most a dropout layer taken as below
  (with no ``dropout`` argument besides);
- dropout: a plain ``nn.Dropout`` (no hooks, forward not overridden) and/or the functional form, at most one of
  them active (p > 0 in training); SDPA gets that one's ``p``, or 0.0. In training with ``p > 0`` SDPA draws its
  own random numbers: the same distribution, not the same sample; so that path is taken on CUDA only (elsewhere the
  reference path draws exactly the original's numbers), and ``ADOPTER_KERNELS_BACKEND=reference`` reproduces a CUDA
  run exactly.

Under grad the fast path returns a contiguous copy of SDPA's output, which SDPA keeps for its backward: the caller
may then change the result in place (``out += x``; here, in a subclass through ``super().forward``, in a parent
module), as it may the original's ``probs @ value``, and later ops see the original's layout (on CUDA SDPA returns
a transposed ``[B, S, H, D]`` buffer, whose layout would carry on, e.g. into a convolution's channels-last output,
where a training Dropout draws its mask in memory order). One copy of ``[..., L, E]``, small next to the products.
Without grad the output keeps SDPA's layout (guard ``attention_output_views`` in the codemod: a ``.view`` of it
must split its last dim only).

The mask and row checks read the data (a device synchronisation on CUDA). They never run while
``torch.compile`` traces (a data-dependent branch would be a graph break): compiled code runs the reference path,
op for op the original's graph. Nor under ``torch.func`` transforms (``vmap`` refuses data-dependent control flow on
a per-sample mask): a call with a mask runs the reference path there. Under ``torch.fx.symbolic_trace`` the call is one leaf node (the checks run when the
graph runs).

Dispatch (``_dispatch``, kernel ``attention_core``): ``auto`` tries the fast path for calls with enough attention
scores (batch x heads x queries x keys) per device, dtype and mode, where it measured faster (``SDPA_CORE``,
``_MIN_SCORES``, ``_sdpa_pays``); elsewhere the reference path runs unless ``ADOPTER_KERNELS_BACKEND`` names
``attention_core=sdpa``.
"""

from __future__ import annotations

import functools
import math
from numbers import Real
from typing import Any, Optional, Union, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import _dispatch
from ._dispatch import Backend, register_kernel, select

__all__ = ["attention_core"]

# An additive-mask entry at or above this keeps its key. Below it the entry swamps the scores (HF masks use
# finfo.min, old GPT-2 code -1e4): a row without a kept key runs the reference path.
_KEPT = -1e4


class _NotGiven:
    def __repr__(self) -> str:
        return "<not given>"


# The default of scale and divisor: the code did not scale. None is a value the code computed (a `scale=None`
# parameter left unset), which the original multiplied by and failed on.
_NOT_GIVEN: Any = _NotGiven()


# docs/KERNEL_PERFORMANCE.md. An H200 (benchmarks/bench_attention_lengths.py, batch 8, 12 heads, head dim 64, 128 to
# 1024 keys, matmul and einsum forms): 0.32-0.48x in inference at 128 and 256 keys (the checks and launches
# dominate), faster from 512 keys in float32 inference and from 768 keys in training and in bfloat16; nanoGPT at 1024
# keys trains 1.12x and infers 1.17-1.19x with half the memory. CPU, one thread (16 to 1024 keys, batch 1 and 4,
# head dims 32 and 64): SDPA with its checks pays once the score matrix is large enough, earlier in inference than in
# training; bfloat16 training was slower at every length (0.28-0.76x); float16 (batch 4 x 12 heads, 16 to 512 keys)
# was faster at every length, 2.03-8.60x in inference, 1.29-1.68x in training (2.22-8.41x with a per-head bias). The
# decision sees no shapes, so _sdpa_pays adds the size test.
SDPA_CORE = Backend(
    "sdpa",
    "CUDA from 8x12x512x512 attention scores (batch x heads x queries x keys) in float32 inference (1.06-1.32x on an "
    "H200, 0.40-0.95x below), from 8x12x768x768 in float32 training and in bfloat16 (1.04-1.10x training, 1.90x "
    "bfloat16 inference there, up to 2.9x at 1024 keys; 0.32-1.00x below; autocast keeps the original); CPU from "
    "4x12x96x96 scores in float32 inference (1.11-1.68x there, up to 3.6x at 512 keys; mostly 0.50-0.92x below), "
    "4x12x192x192 in float32 training (1.05-1.23x there, up to 2.1x; mostly 0.76-1.00x below), 4x12x512x512 in "
    "bfloat16 inference (1.27-1.38x) and 4x12x16x16, the smallest measured, in float16 (2.03-8.60x inference, "
    "1.29-1.68x training); and in each case with rows of at least as many keys as measured faster (CUDA 512 in "
    "float32 inference, 768 otherwise; CPU 49 in inference, 64 in float32 training, 16 in float16: windowed "
    "attention, many short rows, measured 0.52-1.00x below; on CPU in float32 and bfloat16 512 with a mask that "
    "differs between heads, a relative position bias: 0.49-1.30x below; float16 2.22-8.41x at 16-512 keys with "
    "one). Elsewhere (bfloat16 training on CPU, smaller attention, shorter rows) the original computation runs",
    # Under autocast the original runs (see _sdpa): deciding it here spares every such call the size test.
    supports=lambda call: not call.autocast,
    faster=lambda call: call.device == "cuda"
    or (call.device == "cpu"
        and (call.dtype in (torch.float32, torch.float16) or (call.dtype == torch.bfloat16 and not call.grad))),
)
#: The fewest attention scores (batch x heads x queries x keys) from which auto takes SDPA, per (device, dtype,
#: grad): the smallest size measured faster in every configuration tried (benchmarks/bench_attention_lengths.py,
#: head dim 64; CUDA: an H200 at batch 8, the matmul and einsum forms), smaller sizes measured slower or within
#: noise. A configuration without an entry keeps the original computation.
_MIN_SCORES = {
    ("cuda", torch.float32, False): 8 * 12 * 512 * 512,
    ("cuda", torch.float32, True): 8 * 12 * 768 * 768,
    ("cuda", torch.bfloat16, False): 8 * 12 * 768 * 768,
    ("cuda", torch.bfloat16, True): 8 * 12 * 768 * 768,
    ("cuda", torch.float16, False): 8 * 12 * 768 * 768,  # not measured: bfloat16's, the same SDPA kernels
    ("cuda", torch.float16, True): 8 * 12 * 768 * 768,
    ("cpu", torch.float32, False): 4 * 12 * 96 * 96,
    ("cpu", torch.float32, True): 4 * 12 * 192 * 192,
    ("cpu", torch.bfloat16, False): 4 * 12 * 512 * 512,
    # the smallest size measured (faster at every one: gpu_bench/results/cpu-2026-11-28/attention_core_fp16.txt)
    ("cpu", torch.float16, False): 4 * 12 * 16 * 16,
    ("cpu", torch.float16, True): 4 * 12 * 16 * 16,
}
#: And the fewest keys per query row, per (device, dtype, grad): enough scores made of many short rows (windowed
#: attention: MaxViT's 49-key windows times batch x windows) do not make SDPA pay. CPU, one thread, large batches
#: (benchmarks/bench_attention_lengths.py, gpu_bench/results/cpu-2026-11-28/attention_short_rows.txt, batch 256-2048
#: x 2-4 heads): float32 inference 0.66-0.77x at 16 keys, 0.69-1.00x at 25, 1.10x at 32, 1.10-1.23x at 49; float32
#: training 0.52-0.91x at 16-36 keys, 0.97-1.20x at 49, 1.11-1.15x at 64; bfloat16 inference 1.67x at 49. CUDA: the
#: shortest length measured faster (at batch 8 x 12 heads); shorter rows were not measured.
_MIN_KEYS = {
    ("cuda", torch.float32, False): 512,
    ("cuda", torch.float32, True): 768,
    ("cuda", torch.bfloat16, False): 768,
    ("cuda", torch.bfloat16, True): 768,
    ("cuda", torch.float16, False): 768,
    ("cuda", torch.float16, True): 768,
    ("cpu", torch.float32, False): 49,
    ("cpu", torch.float32, True): 64,
    ("cpu", torch.bfloat16, False): 49,
    ("cpu", torch.float16, False): 16,
    ("cpu", torch.float16, True): 16,
}
#: On CPU, per dtype, a mask that differs between heads (a relative position bias [heads, queries, keys]: BEiT, Swin,
#: MaxViT; a full [batch, heads, queries, keys] or [batch x heads, queries, keys] mask) needs rows of this many keys:
#: in float32 SDPA with such a mask ran 0.49-1.15x up to 128 keys, 0.88-0.93x at 197, 0.83-1.30x at 256 and
#: 1.18-1.21x at 512, inference and training (gpu_bench/results/cpu-2026-11-28/attention_masks.txt); bfloat16 was not
#: measured with one and keeps float32's; float16 with one ran 2.22-5.26x in inference and 3.20-8.41x in training at
#: 4 x 12 heads x 16-512 keys, 2.66-6.44x at 64 x 4 heads x 16-256 (attention_masks_fp16_{a,b}.txt): no longer rows
#: than the thresholds above. Padding [batch, 1, 1, keys] and causal [1, 1, queries, keys] masks keep the thresholds
#: above (causal: 1.68-3.38x in float32 inference from 128 keys).
_CPU_MIN_KEYS_PER_HEAD_MASK = {torch.float32: 512, torch.bfloat16: 512}
register_kernel("attention_core", SDPA_CORE, doc="ADP010 softmax(q @ k^T ...) @ v; SDPA where provably the same")


def attention_core(
    query: Tensor,
    key_t: Tensor,
    value: Tensor,
    *,
    scale: Union[float, Tensor] = _NOT_GIVEN,
    divisor: Union[float, Tensor] = _NOT_GIVEN,
    mask: Optional[Tensor] = None,
    masked_inf: Optional[Tensor] = None,
    masked_min: Optional[Tensor] = None,
    softmax: Optional[nn.Module] = None,
    dropout: Optional[nn.Module] = None,
    dropout_p: float = 0.0,
    training: bool = False,
    batched: bool = False,
    score_equation: Optional[str] = None,
    output_equation: Optional[str] = None,
    scale_in_place: bool = False,
    divisor_in_place: bool = False,
    mask_in_place: bool = False,
) -> Tensor:
    """``softmax(query @ key_t [* scale] [/ divisor] [+ mask] [masked_fill], dim=-1) [dropout] @ value``; with
    ``softmax`` given (the code's ``nn.Softmax(dim=-1)`` module, or its ``nn.Sequential`` of that softmax and a
    dropout layer), the probabilities are ``softmax(scores)``; with
    the equations given, the two products are ``torch.einsum(score_equation, query, key_t)`` and
    ``torch.einsum(output_equation, probs, value)`` (``key_t`` is then the key as the code passed it). The
    ``*_in_place`` flags: the code wrote that step in place (``scores += mask``), which keeps the scores' dtype."""
    if scale is None or divisor is None:
        operator = "*" if scale is None else "/"
        raise TypeError(f"unsupported operand type(s) for {operator}: 'Tensor' and 'NoneType'")
    given_scale = None if scale is _NOT_GIVEN else scale
    given_divisor = None if divisor is _NOT_GIVEN else divisor
    einsum = score_equation is not None or output_equation is not None
    # The cached decision comes before the other tests: where auto runs the original computation, a rewritten model
    # pays only it (a launch-bound model pays every microsecond of Python per call). While compiling, the data
    # checks of _sdpa would break the graph: the compiler gets the original ops.
    if isinstance(query, Tensor) and isinstance(key_t, Tensor) and isinstance(value, Tensor):
        grad = _dispatch.records_grad(query, key_t, value)
        if (
            select("attention_core", query, key_t, value, training=grad) == "sdpa"
            and not torch.compiler.is_compiling()
            and (not einsum or _einsum_fits(score_equation, output_equation, query))
            # the einsum key is [..., S, E], the matmul form's key_t [..., E, S]
            and _sdpa_pays(query, key_t.shape[-2] if einsum else key_t.shape[-1], grad,
                           mask if mask is not None else masked_inf if masked_inf is not None else masked_min)
        ):
            fast = _sdpa(query, key_t.transpose(-2, -1) if einsum else key_t, value, given_scale, given_divisor, mask,
                         masked_inf, masked_min, softmax, dropout, dropout_p, training, batched)
            if fast is not None:
                return fast
    return _reference(query, key_t, value, given_scale, given_divisor, mask, masked_inf, masked_min, softmax, dropout,
                      dropout_p, training, batched, score_equation, output_equation,
                      (scale_in_place, divisor_in_place, mask_in_place))


def _einsum_fits(score_equation: Optional[str], output_equation: Optional[str], query: Tensor) -> bool:
    """The equations are `_matmul_equations` and name as many dims as the query has (einsum raises otherwise)."""
    leading = _matmul_equations(score_equation, output_equation)
    return leading is not None and (leading == -1 or query.dim() == leading + 2)


def _split_equation(equation: str) -> Optional[tuple[tuple[str, str], ...]]:
    """``'b h i d, b h j d -> b h i j'`` as ``(('bh', 'id'), ('bh', 'jd'), ('bh', 'ij'))``: each term's batch
    letters (or ``...``) and last two letters; None for anything but two operands of plain letters (or a leading
    ``...``), each at least two letters long."""
    spec = "".join(equation.split())
    if spec.count("->") != 1:
        return None
    inputs, output = spec.split("->")
    terms = [*inputs.split(","), output]
    if len(terms) != 3:
        return None
    split = []
    for term in terms:
        batch = "..." if term.startswith("...") else ""
        letters = term[len(batch):]
        if len(letters) < 2 or not letters.isascii() or not letters.isalpha() or len(set(letters)) != len(letters):
            return None
        split.append((batch + letters[:-2], letters[-2:]))
    return tuple(split)


@functools.lru_cache(maxsize=256)
def _matmul_equations(score_equation: Optional[str], output_equation: Optional[str]) -> Optional[int]:
    """The number of leading dims when the two einsums are ``query @ key.mT`` and ``probs @ value`` over the same
    leading dims in one order: ``A i d, A j d -> A i j`` and ``A i j, A j d -> A i d``, ``A`` the same number of
    distinct letters other than i, j, d in both (-1 for ``...`` in both); None otherwise. Only then is the fast
    path SDPA's function of them."""
    if score_equation is None or output_equation is None:
        return None
    leading = set()
    for equation, shape in ((score_equation, ("xz", "yz", "xy")), (output_equation, ("xy", "yz", "xz"))):
        terms = _split_equation(equation)
        if terms is None or len({batch for batch, _ in terms}) != 1:
            return None
        batch = terms[0][0]
        letters = {name: letter for (_, last), names in zip(terms, shape) for name, letter in zip(names, last)}
        if len(letters) != 3 or len(set(letters.values())) != 3 or set(letters.values()) & set(batch):
            return None
        if any(last != "".join(letters[n] for n in names) for (_, last), names in zip(terms, shape)):
            return None
        leading.add(-1 if batch.startswith("...") else len(batch))
    return leading.pop() if len(leading) == 1 else None


def _sdpa_pays(query: Tensor, keys: int, grad: bool, mask: object = None) -> bool:
    """The size test of SDPA_CORE (the cached decision sees no shapes): enough scores and long enough rows, longer
    on CPU for a mask that differs between heads (``mask``: the call's mask or fill mask, if any); a forced ``sdpa``
    skips it."""
    device = "cuda" if query.is_cuda else "cpu" if query.is_cpu else None
    if device is None:
        return True
    kind = (device, query.dtype, grad)
    least = _MIN_SCORES.get(kind)
    least_keys = _MIN_KEYS.get(kind, 0)
    if device == "cpu" and isinstance(mask, Tensor) and mask.dim() >= 3 and mask.shape[-3] > 1:
        least_keys = max(least_keys, _CPU_MIN_KEYS_PER_HEAD_MASK.get(query.dtype, 0))
    if least is not None and keys >= least_keys and math.prod(query.shape[:-1]) * keys >= least:
        return True
    return _dispatch.forced("attention_core") == "sdpa"  # asked only below the size: it costs a lookup per call


def _reference(
    query: Tensor,
    key_t: Tensor,
    value: Tensor,
    scale: Optional[Union[float, Tensor]],
    divisor: Optional[Union[float, Tensor]],
    mask: Optional[Tensor],
    masked_inf: Optional[Tensor],
    masked_min: Optional[Tensor],
    softmax: Optional[nn.Module],
    dropout: Optional[nn.Module],
    dropout_p: float,
    training: bool,
    batched: bool,
    score_equation: Optional[str] = None,
    output_equation: Optional[str] = None,
    in_place: tuple[bool, bool, bool] = (False, False, False),
) -> Tensor:
    matmul = torch.bmm if batched else torch.matmul
    scores = torch.einsum(score_equation, query, key_t) if score_equation is not None else matmul(query, key_t)
    # In place where the code was (`scores += mask`): the result keeps the scores' dtype (an out-of-place sum of
    # bfloat16 scores and a float32 mask is float32), and the scores are this call's own new tensor.
    scale_in_place, divisor_in_place, mask_in_place = in_place
    if scale is not None:
        scores = scores.mul_(scale) if scale_in_place else scores * scale
    if divisor is not None:
        scores = scores.div_(divisor) if divisor_in_place else scores / divisor
    if mask is not None:
        scores = scores.add_(mask) if mask_in_place else scores + mask
    if masked_inf is not None:
        scores = scores.masked_fill(masked_inf, float("-inf"))
    if masked_min is not None:
        scores = scores.masked_fill(masked_min, torch.finfo(scores.dtype).min)
    probs = softmax(scores) if softmax is not None else F.softmax(scores, dim=-1)
    if dropout is not None:
        probs = dropout(probs)
    if training or dropout_p != 0.0:  # else F.dropout returns its input: skip its Python cost (about 1 us)
        probs = F.dropout(probs, p=dropout_p, training=training)
    return torch.einsum(output_equation, probs, value) if output_equation is not None else matmul(probs, value)


def _row_scale(scale: Tensor, query: Tensor, scores_shape: tuple[int, ...]) -> bool:
    """Whether a scale tensor may scale the query instead of the scores: of the query's dtype and device, not float16
    (`query * scale` may overflow its range where the scores times the scale would not), one number per query row or
    fewer (its last dim, the keys', 1), broadcasting to the scores' shape, every number finite (an infinite or NaN
    scale gives NaN rows in eager, zeros in SDPA)."""
    if scale.dtype != query.dtype or scale.dtype == torch.float16 or scale.device != query.device:
        return False
    if scale.dim() > len(scores_shape) or scale.dim() > 0 and scale.shape[-1] != 1:
        return False
    if torch.broadcast_shapes(scale.shape, scores_shape) != scores_shape:
        return False
    return not torch._C._are_functorch_transforms_active() and bool(torch.isfinite(scale).all())


def _python_scale(scale: Optional[Union[float, Tensor]], divisor: Optional[Union[float, Tensor]]) -> Optional[float]:
    """The SDPA ``scale`` for a Python-number scale and/or divisor (``scale / divisor``); None when either is
    something else (a tensor), the divisor is 0 or not finite, or the scale comes out infinite."""
    result = 1.0
    if scale is not None:
        if isinstance(scale, bool) or not isinstance(scale, Real):
            return None
        result = float(scale)
    if divisor is not None:
        if isinstance(divisor, bool) or not isinstance(divisor, Real):
            return None
        factor = float(divisor)
        if factor == 0.0 or not math.isfinite(factor):
            return None
        result /= factor
    return result if math.isfinite(result) else None  # an infinite scale: NaN/inf scores, eager's own way


def _softmax_then_dropout(softmax: nn.Module) -> Optional[tuple[nn.Module, Optional[nn.Module]]]:
    """The softmax layer and the dropout layer the ``softmax`` argument runs: itself and None, or the elements of a
    plain ``nn.Sequential(softmax, dropout)`` / ``nn.Sequential(softmax)`` (vit-pytorch's MaxViT); None for any
    other container, whose reference path calls it as the code did."""
    if not isinstance(softmax, nn.Sequential):
        return softmax, None
    if not _dispatch.is_plain(softmax, nn.Sequential) or not 1 <= len(softmax) <= 2:
        return None
    layers = list(softmax)
    return layers[0], layers[1] if len(layers) == 2 else None


def _sdpa(
    query: Tensor,
    key_t: Tensor,
    value: Tensor,
    scale: Optional[Union[float, Tensor]],
    divisor: Optional[Union[float, Tensor]],
    mask: Optional[Tensor],
    masked_inf: Optional[Tensor],
    masked_min: Optional[Tensor],
    softmax: Optional[nn.Module],
    dropout: Optional[nn.Module],
    dropout_p: float,
    training: bool,
    batched: bool,
) -> Optional[Tensor]:
    """SDPA where it is provably the reference's function (module docstring); None otherwise."""
    tensors = (query, key_t, value)
    if not all(isinstance(t, Tensor) for t in tensors) or not query.is_floating_point():
        return None
    if any(t.dtype != query.dtype or t.device != query.device for t in tensors):
        return None
    if query.dim() not in ((3,) if batched else (3, 4)) or key_t.dim() != query.dim() or value.dim() != query.dim():
        return None
    lead = query.shape[:-2]
    if key_t.shape[:-2] != lead or value.shape[:-2] != lead or key_t.shape[-2] != query.shape[-1]:
        return None
    if key_t.shape[-1] != value.shape[-2] or any(_dispatch._autocast_on(t.device.type) for t in tensors):
        return None
    scores_shape = (*lead, query.shape[-2], key_t.shape[-1])
    if isinstance(scale, Tensor):
        if not _row_scale(scale, query, scores_shape):
            return None
        query, scale = query * scale, None
    sdpa_scale = _python_scale(scale, divisor)
    if sdpa_scale is None:
        return None
    if softmax is not None:
        layers = _softmax_then_dropout(softmax)
        if layers is None:
            return None
        # the module as the code calls it: nn.Softmax's own forward over the last dim, and nothing observing it
        softmax, within = layers
        dim = getattr(softmax, "dim", None)
        if not _dispatch.is_plain(softmax, nn.Softmax) or type(dim) is not int or dim not in (-1, len(scores_shape) - 1):
            return None
        if within is not None:
            if dropout is not None:
                return None  # two dropouts in a row: SDPA applies one
            dropout = within
    attn_mask: Optional[Tensor] = None
    if sum(m is not None for m in (mask, masked_inf, masked_min)) > 1:
        return None
    masked = masked_inf if masked_inf is not None else masked_min
    if (mask is not None or masked is not None) and torch._C._are_functorch_transforms_active():
        return None  # the mask's data checks below are data-dependent control flow, which torch.func.vmap refuses
    if mask is not None:
        if not isinstance(mask, Tensor) or mask.dtype != query.dtype or mask.device != query.device:
            return None
        if mask.dim() > len(scores_shape) or torch.broadcast_shapes(mask.shape, scores_shape) != scores_shape:
            return None
        # Every row must keep a key: where the mask swamps a whole row's scores (HF padding rows of finfo.min,
        # -inf rows), SDPA's output or gradient differs from eager's (uniform/NaN rows; measured).
        if not bool(torch.isfinite(mask).all()) or not bool((mask.amax(dim=-1) >= _KEPT).all()):
            return None
        attn_mask = mask
    if masked is not None:
        if not isinstance(masked, Tensor) or masked.dtype != torch.bool or masked.device != query.device:
            return None
        if masked.dim() > len(scores_shape) or torch.broadcast_shapes(masked.shape, scores_shape) != scores_shape:
            return None
        keep = ~masked
        if not bool(keep.any(dim=-1).all()):
            return None  # a fully masked row: NaN (-inf) or uniform (finfo.min) in eager
        attn_mask = keep
    p = float(dropout_p) if training else 0.0
    if dropout is not None:
        if not _dispatch.is_plain(dropout, nn.Dropout):
            return None
        if dropout.training and cast(nn.Dropout, dropout).p > 0.0:
            if p > 0.0:
                return None  # the layer and the functional dropout both drop: SDPA applies one
            p = float(cast(nn.Dropout, dropout).p)
    if p > 0.0 and not query.is_cuda:
        return None  # off CUDA SDPA's speed is not worth another random sample: the reference draws the original's
    out = F.scaled_dot_product_attention(
        query, key_t.transpose(-2, -1), value, attn_mask=attn_mask, dropout_p=p, scale=sdpa_scale
    )
    # SDPA's fused kernels keep their output for backward, where `probs @ value` keeps only its inputs: whoever gets
    # the result (this code, a subclass through super().forward, a parent module) may change it in place, as it could
    # the original's (`out += x`), and backward would raise. Under grad the caller gets a copy of its own, laid out
    # as the original's (CUDA's kernels return a transposed [B, S, H, D] buffer: a layout that carries on through
    # later ops, e.g. into a convolution's channels-last output, where a training Dropout draws its mask in memory
    # order, so the sample would differ).
    return out.clone(memory_format=torch.contiguous_format) if out.requires_grad else out
