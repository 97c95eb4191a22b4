"""ADP003 FuseGPT2Attention — GPT2Attention (and its verbatim copy) with SDPA as its attention core.

**What**: ``self.<attr> = GPT2Attention(...)`` in an ``nn.Module``'s ``__init__`` (the class imported under any
name or module path, or defined in the same file; in transformers: ``GPT2Block.attn`` and, under
``if config.add_cross_attention:``, ``GPT2Block.crossattention``), and the same for the transformers 4.34.1 class
"Copied from" GPT2Attention whose ``__init__`` and ``forward`` are identical up to the class-name prefix,
``DecisionTransformerGPT2Attention`` (checked against the installed sources by
``tests/test_real_transformers_attention.py``). Look-alikes with another computation (GPT-Neo, ImageGPT, Bark) are
not listed. One finding per instantiation.

**Why**: eager attention materialises the scores and probabilities; ``F.scaled_dot_product_attention`` fuses
them, with SDPA's own causal mask when there is no padding mask (flash kernels on GPU) and otherwise the causal
buffer slice and the padding mask merged into one additive float mask.

**Example**::

    -        self.attn = GPT2Attention(config, layer_idx=layer_idx)
    +        self.attn = adopter_kernels.gpt2_attention_sdpa(GPT2Attention)(config, layer_idx=layer_idx)

**Fix safety**: safe for the listed classes as transformers defines them. The factory returns a cached subclass
that inherits ``__init__`` (same arguments, parameters and buffers, so checkpoints load strictly) and keeps
``isinstance`` checks true; it returns the same ``(output, present)`` tuple and falls back to the original for
``output_attentions``, a head mask, ``reorder_and_upcast_attn``, a different ``forward`` signature (with a
warning) or missing attributes. Attention dropout runs only in training; its random draws differ from
``nn.Dropout``'s. Rows whose visible keys are all padding (left padding) give eager's outputs, but their
(meaningless) gradients differ from eager's.

**Limitations**: guard ``attention_class_fits_drop_in``: a class defined in the file being rewritten (with the
classes of that file it derives from) must have a ``forward`` taking exactly the supported parameters (no decorator,
``*args`` or ``**kwargs``) and set in ``__init__`` every attribute the fast path reads (``c_attn``, ``c_proj``,
``split_size``, the ``bias`` buffer, ...); otherwise it is refused, since the subclass would only warn and run the
original forward (transformers 4.57's copies, with ``past_key_values``/``cache_position``, are refused so).
Otherwise classes are recognised by name (an imported class by its name alone): a same-named class whose forward
keeps the signature but computes something else would be rewritten wrongly (review the diff). Only ``self.<attr> =
Class(...)`` statements in ``__init__`` are rewritten; not local variables, conditional expressions,
``nn.ModuleList`` elements, builder functions, or calls with ``*args`` / ``**kwargs`` (refused: the arguments cannot
be checked). Generated classes are not importable by name, so ``torch.save(model)`` of a whole model cannot pickle
them.

**Performance**: measured (docs/KERNEL_PERFORMANCE.md; ``adopter_kernels.backends()`` shows the choice). On CPU the
SDPA core ran 0.99-1.21x the speed of the eager attention in float32 (``faster`` in 4 of 8 timings, never slower)
and 0.90-1.08x in bfloat16 inference (never slower), so it runs there; bfloat16 training was 0.80-1.18x (below 1 at
GPT-2 size), so the subclass runs the original forward there. CUDA: SDPA (or xformers where timed faster), not
yet measured on a GPU.
"""

from .. import codemod


class FuseGPT2Attention(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "ADP003: instantiate GPT2Attention (and its verbatim copy) as its SDPA subclass."
    RULES = ("ADP003",)
