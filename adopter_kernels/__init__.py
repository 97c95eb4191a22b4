"""Runtime kernels imported by model code rewritten with adopter_codemods.

Each op keeps the exact semantics of the code it replaces on its pure-PyTorch reference path (CPU,
and the oracle in tests) and has a fast path (own Triton kernels, PyTorch's SDPA, folded or packed weights)
that ``auto`` takes only where it measured faster than the original. The package depends only on torch:
triton is imported lazily, the first time a call is routed to it. ``backends()`` shows, per kernel, the backends
available, why not, and what ``auto`` selects;
``ADOPTER_KERNELS_BACKEND`` overrides it, globally or per kernel (see ``_dispatch``).

| rule   | what rewritten code calls                                  |
|--------|------------------------------------------------------------|
| ADP001 | ``bert_self_attention_sdpa(cls)``                          |
| ADP002 | ``t5_attention_sdpa(cls)``                                 |
| ADP003 | ``gpt2_attention_sdpa(cls)``                               |
| ADP004 | ``softmax``, ``torch_softmax``, ``tensor_softmax``         |
| ADP005 | ``FusedDropoutAddLayerNorm``, ``dropout_add_layer_norm``,  |
|        | ``dropout_add_layer_norm_module`` (post-LN, F.dropout),    |
|        | ``dropout_add_layer_norm_residual`` (pre-LN: also the sum) |
| ADP006 | ``linear_bias_activation(input, linear, activation, **kw)``|
|        | ``FusedSequential`` (Linear -> activation children)        |
| ADP007 | ``conv_bn2d(input, conv, bn)``, ``FusedSequential``        |
| ADP008 | ``linear_bn1d(input, linear, bn)``, ``FusedSequential``    |
| ADP009 | ``packed_qkv_linear(input, q, k, v)``                      |
| ADP010 | ``attention_core(query, key_t, value, *, scale, ...)``     |
| ADP011 | ``rms_norm_module(cls, cast, weight, eps)``, ``rms_norm``  |
| ADP012 | ``gated_linear_unit(input, gate, up, activation, **kw)``   |
| ADP013 | ``rotary_embedding(x, cos, sin)``                          |
| ADP014 | ``bart_attention_sdpa(cls)``                               |
"""

try:
    import torch as _torch  # every module below needs it
except ImportError as exc:  # rewritten model code deployed without PyTorch: say what to install
    raise ImportError(
        "adopter_kernels needs PyTorch (torch >= 2.1), which is not installed: `pip install torch` (for a CUDA "
        "build see https://pytorch.org/get-started), or `pip install adopter-kernels`, which depends on it"
    ) from exc

from ._cache import clear_weight_cache, set_weight_cache
from ._dispatch import BACKEND_ENV, backends, current_backend, triton_available, use_backend
from .activation import classify_activation, linear_bias_activation
from .attention import bart_attention_sdpa, bert_self_attention_sdpa, gpt2_attention_sdpa, t5_attention_sdpa
from .attention_core import attention_core
from .batch_norm import FusedSequential, conv_bn2d, fold_bn, linear_bn1d
from .layer_norm import (
    FusedDropoutAddLayerNorm,
    dropout_add_layer_norm,
    dropout_add_layer_norm_module,
    dropout_add_layer_norm_residual,
)
from .gated_mlp import gated_linear_unit
from .qkv import packed_qkv_linear
from .rms_norm import rms_norm, rms_norm_module
from .rotary import rotary_embedding
from .softmax import softmax, tensor_softmax, torch_softmax

# torch.fx leaf functions: symbolic tracing records one call of the kernel (modules passed as get_attr nodes, so
# train/eval is read when the traced graph runs) instead of tracing into its dispatch, which inspects values.
# (linear_bias_activation and gated_linear_unit decide themselves, in activation.py / gated_mlp.py: a function
# activation cannot be a graph argument; rms_norm_module's forward reaches the leaf through rms_norm.py.)
# conv_bn2d and linear_bn1d are traced through instead, giving the original graph (see batch_norm.py).
_LEAVES = ("softmax", "torch_softmax", "tensor_softmax", "dropout_add_layer_norm", "dropout_add_layer_norm_module",
           "dropout_add_layer_norm_residual", "packed_qkv_linear", "attention_core", "rms_norm", "rotary_embedding")
for _name in _LEAVES:
    _torch.fx.wrap(_name)

__all__ = [
    "BACKEND_ENV",
    "FusedDropoutAddLayerNorm",
    "FusedSequential",
    "attention_core",
    "backends",
    "bart_attention_sdpa",
    "bert_self_attention_sdpa",
    "classify_activation",
    "clear_weight_cache",
    "conv_bn2d",
    "current_backend",
    "dropout_add_layer_norm",
    "dropout_add_layer_norm_module",
    "dropout_add_layer_norm_residual",
    "fold_bn",
    "gated_linear_unit",
    "gpt2_attention_sdpa",
    "linear_bias_activation",
    "linear_bn1d",
    "packed_qkv_linear",
    "rms_norm",
    "rms_norm_module",
    "rotary_embedding",
    "set_weight_cache",
    "softmax",
    "t5_attention_sdpa",
    "tensor_softmax",
    "torch_softmax",
    "triton_available",
    "use_backend",
]
