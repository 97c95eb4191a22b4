"""ADP009 runtime: the q/k/v projections of one input as a single GEMM.

``packed_qkv_linear(x, q, k, v)`` returns ``(q(x), k(x), v(x))`` computed as one ``F.linear`` over
``cat([Wq, Wk, Wv])`` (biases concatenated; a missing bias counts as zeros when another one exists, no
bias at all when none does) and split along the last dim by the three ``out_features``. The three
Linear modules keep their parameters, so state-dict keys do not change.

The outputs are column slices of one buffer: ``.view(B, S, heads, head_dim)`` works, a ``.view`` that merges
the last dim with earlier ones needs ``.reshape``. They are not views for autograd (``unsafe_split``): like
the Linears' own outputs, each may be changed in place.

In training / with grad, the weights are concatenated on every call (autograd splits the gradients back
to each Linear). In eval or under ``no_grad`` the packed weight is cached until a source tensor changes
(see ``_cache``). Linears that are not plain ``nn.Linear`` (overridden forward, hooks, a weight computed on every
read by ``torch.nn.utils.parametrize``) or whose weights differ in dtype/device are applied one by one.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ._cache import cached, needs_grad
from ._dispatch import Backend, is_plain, parametrized, register_kernel, select

__all__ = ["packed_qkv_linear"]

# On CPU one [3d, d] GEMM measured no faster than three [d, d] GEMMs at BERT-base size and slower at small sizes:
# the three Linears run there. On an H200 it measured 1.2-1.45x faster in inference and the same or faster in
# training (benchmarks/bench_kernels.py, docs/KERNEL_PERFORMANCE.md).
PACKED = Backend(
    "packed",
    "CUDA (one GEMM instead of three: 1.2-1.45x in inference on an H200). CPU: measured no faster at BERT-base "
    "size and slower at small sizes, so the three Linears run",
    faster=lambda call: call.device == "cuda",
)
register_kernel("packed_qkv_linear", PACKED, doc="ADP009 (q(x), k(x), v(x)) as one GEMM over the packed weights")


def _pack(q: nn.Linear, k: nn.Linear, v: nn.Linear) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    layers = (q, k, v)
    weight = torch.cat([m.weight for m in layers])
    if all(m.bias is None for m in layers):
        return weight, None
    biases: List[torch.Tensor] = [m.bias if m.bias is not None else m.weight.new_zeros(m.out_features) for m in layers]
    return weight, torch.cat(biases)


def packed_qkv_linear(
    input: torch.Tensor, q: nn.Linear, k: nn.Linear, v: nn.Linear
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(q(input), k(input), v(input))`` with one matrix multiply."""
    if not (isinstance(q, nn.Linear) and isinstance(k, nn.Linear) and isinstance(v, nn.Linear)):
        return q(input), k(input), v(input)  # another module (`nn.Identity()` bound in another branch): as written
    if not q.in_features == k.in_features == v.in_features:
        raise ValueError(
            "packed_qkv_linear needs three Linear layers reading the same features, got in_features "
            f"q={q.in_features}, k={k.in_features}, v={v.in_features}"
        )
    # the cached decision first (cheapest), but no read of a weight computed on every read
    if parametrized(q, k, v) or select("packed_qkv_linear", input, q.weight) != "packed":
        return q(input), k(input), v(input)
    layers = (q, k, v)
    params = [t for m in layers for t in (m.weight, m.bias) if t is not None]
    if not (
        all(is_plain(m, nn.Linear) for m in layers)
        and all(t.dtype == q.weight.dtype and t.device == q.weight.device for t in params)
    ):
        return q(input), k(input), v(input)
    sources = tuple(t for m in layers for t in (m.weight, m.bias))
    if needs_grad(sources):
        weight, bias = _pack(q, k, v)
    else:
        weight, bias = cached(q, sources, (id(k), id(v)), lambda: _pack(q, k, v))
    out = F.linear(input, weight, bias)
    sizes = [q.out_features, k.out_features, v.out_features]
    if torch._C._are_functorch_transforms_active():
        query, key, value = out.split(sizes, dim=-1)  # torch.func.vmap has no rule for unsafe_split
    else:
        # unsafe_split: three tensors autograd does not treat as views of `out` (which nothing else reads), so the
        # caller may change one in place, as it may a Linear's output (Longformer's `query_vectors /= ...`);
        # `split`'s views of one buffer refuse that.
        query, key, value = out.unsafe_split_with_sizes(sizes, dim=-1)
    return query, key, value
