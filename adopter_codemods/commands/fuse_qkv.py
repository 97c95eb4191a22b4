"""ADP009 FuseQKV — three ``Linear`` projections of the same input (q/k/v) as one packed GEMM.

**What**: three ``nn.Linear`` layers applied to the same value, wherever the calls stand: each the whole
right-hand side of an assignment (``query = self.q_proj(hidden_states)``, GPT-Neo, GPT-J, CodeGen, LLaMA in
transformers 4.34), the receiver of a chain (``self.q_proj(h).view(hidden_shape).transpose(1, 2)``, LLaMA, Mistral,
Qwen2, BERT and ViT in transformers 4.57 and 5.x), the argument of a helper (ViT's
``self.transpose_for_scores(self.key(h))``, CLIP's ``self._shape(self.k_proj(h), -1, bsz)``) or an operand
(OPT/BART's ``self.q_proj(h) * self.scaling``), in any order, in separate statements of one block with other code
between, also inside an ``if`` arm or a helper method. Bias or no bias, and k/v narrower than q (grouped-query
attention), are fine. One finding per triple.

**Why**: one ``[3d, d]`` GEMM instead of three ``[d, d]`` GEMMs reads the input once and launches one kernel (paper
Table 1 rule 9, slapo's FusedQKV); with tensor parallelism it also saves communication.

**Example**: where each projection is a whole assignment, the three become one::

    -        query = self.q_proj(hidden_states)
    -        key = self.k_proj(hidden_states)
    -        value = self.v_proj(hidden_states)
    +        query, key, value = adopter_kernels.packed_qkv_linear(hidden_states, self.q_proj, self.k_proj, self.v_proj)

otherwise the packed outputs are bound to fresh names (``<layer attribute>_out``, numbered if the function
already uses that name) in a new statement right before the first projection's statement, and each projection
call becomes its name; the rest of every statement stays as written::

    +        q_proj_out, k_proj_out, v_proj_out = adopter_kernels.packed_qkv_linear(hidden_states, self.q_proj, self.k_proj, self.v_proj)
    -        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    -        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    +        query_states = q_proj_out.view(hidden_shape).transpose(1, 2)
    +        key_states = k_proj_out.view(hidden_shape).transpose(1, 2)

(a first projection that is a whole ``name = proj(x)`` gives its name to its output in place:
``mixed_query_layer, key_out, value_out = ...`` for ViT).

**Fix safety**: ``packed_qkv_linear(x, q, k, v)`` returns ``(q(x), k(x), v(x))`` from one ``F.linear`` over the
concatenated weights and biases (a missing bias counts as zeros); the three Linears keep their attributes, so
``state_dict`` keys and checkpoints are unchanged, and their gradients are split back by autograd. The three
``in_features`` are equal whenever the original code runs, since all three layers read the same tensor (the kernel
raises otherwise, as the original would). Non-plain Linears (hooks, overridden forward) or mixed dtypes/devices are
applied one by one. Numerically the packed GEMM may differ from three GEMMs in the last bits (different blocking),
as any matmul reordering does. The projections now run together, where the first ran or later: the rewrite
assumes calling the three Linears has no side effect and depends only on their parameters and the input (a
forward hook with side effects would run at another time). It is refused when the input may not hold the same
value at the packed call as at every projection (redefined in between, or read by code in between that makes
calls, which may modify it in place: ``h.mul_(2)``; ``x.size()`` and other metadata reads are fine), when code in
between reaches one of the layers other than by calling it (``self.k.weight.requires_grad_(False)``), when a call
of a projection's own statement that reads the input would run after it instead of before, when some path runs
only part of the projections (one under an ``if`` the others skip, an early ``return`` in between, a ``for`` or
``with`` block of its own), and when a projection sits where it may not run or may run more than once (a lambda, a
comprehension, a conditional expression, behind ``and``/``or``, past the first comparison of a chain). One layer
used for two of the roles (``a = self.q(x); b = self.q(x)``) is not packed: it would compute that GEMM twice.

**Limitations**: the outputs are column slices of one buffer: ``.view`` that splits the last dim (heads) works,
but a later ``.view`` merging the last dim with an earlier one raises (use ``.reshape``). Autograd forbids
modifying such slices (or views of them) in place, so the rewrite is refused when a variable that may alias an
output is modified in place (Longformer's ``query_vectors /= math.sqrt(self.head_dim)``, ``.mul_``,
``inplace=True``, also through ``.view(...)`` chains and helpers returning their argument; guard
``qkv_outputs_not_modified_in_place``); an in-place change inside a function the output is passed to is not seen.
Refused when the inputs differ (cross-attention: keys and values from the encoder states), when the projections sit
in different arms of an ``if``/``elif`` chain (BERT's self-attention in transformers 4.x, projecting keys and
values per arm), when they are not all in one block (statements of the same suite), and when the packed statement
would go into a one-line suite (``if c: q = ...; k = ...``). GPT-2's already packed ``Conv1D`` is not a ``Linear``.

**Performance**: measured (docs/KERNEL_PERFORMANCE.md). On CPU the packed GEMM was within noise of three Linears at
BERT-base size (0.97-1.12x) and slower at small sizes (0.49-0.52x in float32 inference), so on CPU
``packed_qkv_linear`` applies the three Linears; on CUDA it runs one GEMM (not yet measured on a GPU).
"""

from .. import codemod


class FuseQKV(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "ADP009: compute three Linear projections of one input as adopter_kernels.packed_qkv_linear."
    RULES = ("ADP009",)
