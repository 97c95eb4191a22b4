"""ADP004 FastSoftmax — ``torch.nn.functional.softmax`` as the ``adopter_kernels.softmax`` drop-in.

**What**: every call of ``torch.nn.functional.softmax`` however it was imported (``F.softmax``,
``nn.functional.softmax``, ``torch.nn.functional.softmax``, ``from torch.nn.functional import softmax as sm``),
with any ``dim`` (positional or keyword), ``dtype`` and ``_stacklevel``; one finding per call. Calls are found in
``forward`` and the helpers it calls, in the class's other methods (``generate``, ``_attn`` taking ``*args``,
``@torch.no_grad()`` methods) and in the module's top-level functions (ProphetNet's ``softmax(hidden_state, dim)``).

**Why**: attention probabilities are a row-wise softmax over the last dim; on CUDA the runtime runs it as one
Triton row kernel (forward and backward) instead of PyTorch's generic reduction (paper Table 1 rule 4 used
xformers' Triton softmax, which xformers removed in 0.0.27).

**Example**::

    -        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
    +        attention_probs = adopter_kernels.softmax(attention_scores, dim=-1)

**Fix safety**: safe. ``adopter_kernels.softmax`` has the signature of ``torch.nn.functional.softmax`` and the
argument list is kept as written (formatting and comments too), so it binds the same way; the Triton kernel only
runs on CUDA for the last dim of a contiguous float16/bfloat16/float32 tensor, everything else calls torch
(``dim=None`` keeps torch's implicit-dim rule and warning). The call is a single expression, so no data flow
changes.

**Limitations**: ``torch.softmax`` and ``Tensor.softmax`` (other APIs) are not rewritten; neither are calls with
``*args``/``**kwargs`` unpacking, calls inside lambdas, comprehensions or conditional expressions, bodies compiled
by a decorator such as ``@torch.jit.script`` (TorchScript cannot call the runtime kernel; a model scripted as a
whole with ``torch.jit.script(model)`` is not supported after the rewrite either), async functions, methods of
classes that are not ``nn.Module`` subclasses, and functions nested in other functions. A class whose ``forward``
is nested too deeply for the walk is skipped, as is another method or top-level function that is.
A local name that shadows the import (``F = something`` inside a function) is not seen.

**Performance**: measured (docs/KERNEL_PERFORMANCE.md). The Triton row kernel runs on CUDA only (not yet measured on
a GPU). On CPU ``adopter_kernels.softmax`` calls ``F.softmax`` itself: within noise at attention size (batch 4 x
12 heads x 128 x 128: 0.89-1.04x; 0.95x before the decision was cached) plus a few microseconds of dispatch per
call, visible only on tiny inputs
(2048 elements: 0.75x).
"""

from .. import codemod


class FastSoftmax(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "ADP004: call adopter_kernels.softmax (Triton row kernel on CUDA) for torch.nn.functional.softmax."
    RULES = ("ADP004",)
