"""ADP013 FuseRotaryEmbedding — the rotary position embedding ``(x * cos) + (rotate_half(x) * sin)`` as one kernel.

**What**: ``(q * cos) + (rotate_half(q) * sin)`` (and the same for ``k``) in a function or method, where
``rotate_half`` is a function defined once at the top of the same file whose body is exactly Hugging Face's::

    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)

(any function and parameter names, docstring and annotations ignored; the guard ``rotate_half_is_exact`` compares
ASTs) and is called on the same value that is multiplied by ``cos``. LLaMA, Mistral, Qwen2, Gemma, Idefics,
GPT-NeoX, Persimmon, ... ``apply_rotary_pos_emb``. A second variant takes GPT-J's interleaved rotation
(GPT-J, CodeGen), a helper whose body is exactly::

    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)

and rewrites to ``rotary_embedding(x, cos, sin, interleaved=True)``. One finding per rotated tensor.

**Why**: eagerly this is two slices, a negation, a concatenation, two products and a sum (six kernels, four
temporaries the size of ``q``); the fused kernel reads ``x``, ``cos`` and ``sin`` once and writes the result once.

**Example**::

    -    q_embed = (q * cos) + (rotate_half(q) * sin)
    -    k_embed = (k * cos) + (rotate_half(k) * sin)
    +    q_embed = adopter_kernels.rotary_embedding(q, cos, sin)
    +    k_embed = adopter_kernels.rotary_embedding(k, cos, sin)

**Fix safety**: safe. ``rotary_embedding(x, cos, sin)`` is the original expression with HF's ``rotate_half`` (GPT-J's
``rotate_every_two`` when ``interleaved=True``) on its reference path (any shapes that broadcast, odd last dims included); the Triton path (CUDA, 4-D ``x``, even last
dim, one dtype, ``cos``/``sin`` without grad) computes in float32 and rounds once, so in half precision it may
differ from eager in the last bit. No layer is touched.

**Limitations**: refused when the helper's body differs in any way (``x.chunk(2, dim=-1)``, one-line tuple
unpacking, TF code), when its name is bound anywhere else in the file (a parameter or variable of that name
included), when the operands are written in another order (``cos * q``, ``rotate_half(q) * sin + q * cos``), when
``rotate_half`` is applied to an expression rather than a variable, and for interleaved rotations written
otherwise (``x[..., ::2]``, 3-D indexing: only GPT-J's 4-D form is mapped, and the reference path keeps its
4-D-only indexing). Partial rotary dimensions sliced before the call are fine (the call on the slice is rewritten).

**Performance**: measured (docs/KERNEL_PERFORMANCE.md, run D). The Triton kernel runs on CUDA only (not yet measured
on a GPU). On CPU ``rotary_embedding`` computes the original expression itself: 0.71-1.09x, within noise except
bfloat16 training at base size (0.96x `slower`, at load 5.5); the dispatch's few microseconds show on small inputs.
"""

from .. import codemod


class FuseRotaryEmbedding(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "ADP013: compute (x * cos) + (rotate_half(x) * sin) as adopter_kernels.rotary_embedding."
    RULES = ("ADP013",)
