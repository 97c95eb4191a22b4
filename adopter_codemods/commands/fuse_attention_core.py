"""ADP010 FuseAttentionCore — a hand-written attention core as one ``adopter_kernels.attention_core`` call.

**What**: ``softmax(q @ kt [* scale] [/ divisor] [+ mask] [.masked_fill(m, -inf | finfo(scores.dtype).min)],
dim=-1) [-> nn.Dropout | F.dropout(p, training)] @ v``, matched by structure, not by class name: ``@``,
``torch.matmul`` or ``torch.bmm`` (one spelling for both products), ``F.softmax``/``torch.softmax``/
``.softmax`` over ``dim=-1``; any step in brackets may be absent; the query may have been scaled before (timm,
BART). The additive mask is whatever the code adds (an HF ``finfo.min`` mask, a relative-position bias, LeViT's
attention biases). Where the probabilities are needed on some paths only (a head mask under
``if head_mask is not None:``, ``(ctx, probs) if output_attentions else (ctx,)``), those paths keep the code as
written: the region becomes ``if <those conditions>: <as written> else: <fused>``. A mask added under
``if attention_mask is not None:`` (BERT-family code) is passed as ``mask=attention_mask`` instead (None: no mask).

**Why**: ``F.scaled_dot_product_attention`` (flash / memory-efficient / cuDNN kernels on GPU) never materialises
the ``[L, S]`` probabilities: less memory traffic and memory, and one call instead of five.

**Example**::

    -        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    -        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
    -        att = F.softmax(att, dim=-1)
    -        att = self.attn_dropout(att)
    -        y = att @ v
    +        y = adopter_kernels.attention_core(q, k.transpose(-2, -1), v, scale=(1.0 / math.sqrt(k.size(-1))),
    +            masked_inf=self.bias[:, :, :T, :T] == 0, dropout=self.attn_dropout)

**Fix safety**: the kernel's reference path is the matched code op for op (same order of scale, mask, fill,
softmax, dropout module or ``F.dropout(p, training)``), and SDPA runs only where it is the same function up to
rounding (adopter_kernels/attention_core.py): a Python-number scale, masks that broadcast to the scores' shape,
every query row keeping a key (fully masked rows, NaN or uniform in eager, run the reference path), dropout
``p if training else 0`` from a plain ``nn.Dropout``. No layer is added or removed: ``state_dict`` keys are
unchanged. The engine refuses a match when a matched intermediate (scores, probabilities) is read anywhere else
on a path the fused call covers, when an input changes in between, or when the fallback's conditions are not
simple (names, ``is None``, ``not``, ``and``/``or``) or are reassigned from the region on. A ``masked_fill``
value other than ``-inf`` or ``torch.finfo(<scores>.dtype).min`` is refused (guard ``attention_fill_values``).

**Limitations**: refused: a softmax over another dim or with ``dtype=`` (upcast), two additive terms
(``s + bias + mask``), masks applied through ``.view`` reshapes (BART/CLIP/Whisper's ``attn_weights.view(...) +
mask``) and statements that read the scores between the products (shape checks that raise, DistilBERT's
``expand_as(scores)``), ``einsum`` and ``baddbmm`` forms, ``torch.tensor(finfo.min)`` fills, and cores split
across helper methods. ``is_causal=True`` is never emitted: a causal mask is passed as
written. In training with dropout > 0 on CUDA, SDPA draws its own random numbers (same distribution, not
the same sample; elsewhere the reference path runs); ``ADOPTER_KERNELS_BACKEND=reference`` reproduces the original
exactly. The mask checks read the data
(a device synchronisation on CUDA).

**Performance**: measured (docs/KERNEL_PERFORMANCE.md, run C). On CPU SDPA with the checks was 1.42-1.45x faster at
base-size inference (batch 4 x 12 heads x 128 x 64) but 0.35x at small float32 inference and 0.46x in bfloat16
training, so on CPU ``attention_core`` runs the hand-written computation
(``ADOPTER_KERNELS_BACKEND=attention_core=sdpa`` opts in); on CUDA it runs SDPA (not yet measured on a GPU). Under ``torch.compile`` it runs
the hand-written ops (the data checks would break the graph).
"""

from .. import codemod


class FuseAttentionCore(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "ADP010: run a hand-written softmax(q @ k^T) @ v attention core as adopter_kernels.attention_core."
    RULES = ("ADP010",)
