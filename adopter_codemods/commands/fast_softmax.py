"""ADP004 FastSoftmax — the three softmax APIs as the ``adopter_kernels`` drop-ins.

**What**: every call of ``torch.nn.functional.softmax`` however it was imported (``F.softmax``,
``nn.functional.softmax``, ``torch.nn.functional.softmax``, ``from torch.nn.functional import softmax as sm``),
of ``torch.softmax``, and of the ``Tensor.softmax`` method (``attn.softmax(dim=-1)``, ``(q @ k).softmax(-1)``:
timm's attention writes it so), with any ``dim`` (positional or keyword), ``dtype`` (positional or keyword) and, for
F.softmax, ``_stacklevel``; one finding per call. Calls are found in ``forward`` and the helpers it calls, in the
class's other methods (``generate``, ``_attn`` taking ``*args``, ``@torch.no_grad()`` methods) and in the module's
top-level functions (ProphetNet's ``softmax(hidden_state, dim)``).

**Why**: attention probabilities are a row-wise softmax over the last dim; on CUDA the runtime runs it as one
Triton row kernel (forward and backward) instead of PyTorch's generic reduction (paper Table 1 rule 4 used
xformers' Triton softmax, which xformers removed in 0.0.27).

**Example**::

    -        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
    +        attention_probs = adopter_kernels.softmax(attention_scores, dim=-1)
    -        attn = attn.softmax(dim=-1)
    +        attn = adopter_kernels.tensor_softmax(attn, dim=-1)
    -        w = torch.softmax(scores, -1, torch.float32)
    +        w = adopter_kernels.torch_softmax(scores, -1, torch.float32)

**Fix safety**: safe. Each drop-in has its API's signature (``softmax``: F.softmax's; ``torch_softmax``:
``torch.softmax(input, dim, dtype=None)``; ``tensor_softmax``: the method's, receiver first) and the argument list
is kept as written (formatting and comments too), so it binds the same way; off the fast path each makes the
original call, so results, dtype casting, ``dim=None``'s implicit-dim rule and errors are the API's own. The Triton
kernel only runs on CUDA for the last dim of a contiguous float16/bfloat16/float32 plain ``torch.Tensor``. A method
call cannot be told from another library's ``softmax`` method statically: ``tensor_softmax(x, ...)`` calls
``x.softmax(dim)`` (``x.softmax(dim, dtype=dtype)`` when a dtype is given) on whatever ``x`` is, and a tensor
subclass that overrides ``softmax`` or ``__torch_function__`` gets its override. Guard ``softmax_arguments_fit``:
calls whose arguments do not fit the API (``x.softmax(-1, _stacklevel=3)``: ``_stacklevel`` is F.softmax's alone;
no ``dim`` for torch.softmax / the method; unknown keywords; too many positionals) are left alone: torch rejects
them, so no fast path could run. The call is a single expression, so no data flow changes.

**Limitations**: not rewritten: calls with ``*args``/``**kwargs`` unpacking, calls inside lambdas, comprehensions
or conditional expressions, bodies compiled by a decorator such as ``@torch.jit.script`` (TorchScript cannot call
the runtime kernel from such a function; a model scripted as a whole with ``torch.jit.script(model)`` works, the
drop-ins being typed like the APIs), async functions, methods of classes that are not ``nn.Module`` subclasses,
functions nested in other functions, and ``self.softmax(...)`` (a method of the module itself). A class whose
``forward`` has more than 256 control-flow paths is skipped, as is another method or top-level function with more
than 64. A local name that shadows the import (``F = something`` inside a function) is not seen. With ``AdoptAll``,
a softmax inside a hand-written attention core is rewritten first and the core (ADP010) is fused in the next round,
whichever softmax API it used.

**Performance**: measured (docs/KERNEL_PERFORMANCE.md). The Triton row kernel runs on CUDA only (not yet measured on
a GPU). On CPU ``adopter_kernels.softmax`` calls ``F.softmax`` itself: within noise at attention size (batch 4 x
12 heads x 128 x 128: 0.89-1.04x; 0.95x before the decision was cached) plus a few microseconds of dispatch per
call, visible only on tiny inputs
(2048 elements: 0.75x); the other two forms do the same dispatch.
"""

from .. import codemod


class FastSoftmax(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "ADP004: F.softmax, torch.softmax and Tensor.softmax as adopter_kernels drop-ins (Triton on CUDA)."
    RULES = ("ADP004",)
