"""ADP009 FuseQKV — three ``Linear`` projections of the same input (q/k/v) as one packed GEMM.

**What**: ``query = self.q_proj(h); key = self.k_proj(h); value = self.v_proj(h)`` — three ``nn.Linear`` layers
applied to the same value, each the whole right-hand side of an assignment, in any order, with other statements in
between as long as they do not read the first outputs (GPT-Neo, GPT-J, CodeGen-style and LLaMA/Mistral attention,
also inside an ``if`` arm or a helper method). Bias or no bias, and k/v narrower than q (grouped-query
attention), are fine. One finding per triple.

**Why**: one ``[3d, d]`` GEMM instead of three ``[d, d]`` GEMMs reads the input once and launches one kernel (paper
Table 1 rule 9, slapo's FusedQKV); with tensor parallelism it also saves communication.

**Example**::

    -        query = self.q_proj(hidden_states)
    -        key = self.k_proj(hidden_states)
    -        value = self.v_proj(hidden_states)
    +        query, key, value = adopter_kernels.packed_qkv_linear(hidden_states, self.q_proj, self.k_proj, self.v_proj)

**Fix safety**: safe for the matched statements: ``packed_qkv_linear(x, q, k, v)`` returns ``(q(x), k(x), v(x))``
from one ``F.linear`` over the concatenated weights and biases (a missing bias counts as zeros); the three
Linears keep their attributes, so ``state_dict`` keys and checkpoints are unchanged, and their gradients are
split back by autograd. The three ``in_features`` are equal whenever the original code runs, since all three
layers read the same tensor (the kernel raises otherwise, as the original would). Non-plain Linears (hooks,
overridden forward) or mixed dtypes/devices are applied one by one. Numerically the packed GEMM may differ from
three GEMMs in the last bits (different blocking), as any matmul reordering does.

**Limitations**: the outputs are column slices of one buffer: ``.view`` that splits the last dim (heads) works,
but a later ``.view`` merging the last dim with an earlier one raises (use ``.reshape``). Autograd forbids
modifying such slices (or views of them) in place, so the rewrite is refused when a variable that may alias an
output is modified in place (Longformer's ``query_vectors /= math.sqrt(self.head_dim)``, ``.mul_``,
``inplace=True``; guard ``qkv_outputs_not_modified_in_place``); an in-place change inside a function the output is
passed to is not seen. Refused when an output is not a plain ``name = proj(x)`` statement
(ViT/BERT's ``self.transpose_for_scores(self.key(h))``, OPT/BART's ``self.q_proj(h) * self.scaling``, CLIP's
``self._shape(self.k_proj(h), ...)``), when an output is read before the last projection runs, when the inputs
differ (cross-attention: keys and values from the encoder states), and when the projections sit in different
arms of an ``if``/``elif`` chain (BERT's self-attention). GPT-2's already packed ``Conv1D`` is not a ``Linear``.

**Performance**: measured (docs/KERNEL_PERFORMANCE.md). On CPU the packed GEMM was within noise of three Linears at
BERT-base size (0.97-1.12x) and slower at small sizes (0.49-0.52x in float32 inference), so on CPU
``packed_qkv_linear`` applies the three Linears; on CUDA it runs one GEMM (not yet measured on a GPU).
"""

from .. import codemod


class FuseQKV(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "ADP009: compute three Linear projections of one input as adopter_kernels.packed_qkv_linear."
    RULES = ("ADP009",)
