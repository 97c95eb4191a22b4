"""ADP002 FuseT5Attention — T5Attention (and its verbatim copies) with SDPA as its attention core.

**What**: ``self.<attr> = T5Attention(...)`` in an ``nn.Module``'s ``__init__`` (the class imported under any name
or module path, or defined in the same file; in transformers: ``T5LayerSelfAttention.SelfAttention`` and
``T5LayerCrossAttention.EncDecAttention``), and the same for the transformers 4.34.1 classes "Copied from"
T5Attention whose ``__init__`` and ``forward`` are identical up to the class-name prefix: ``LongT5Attention``,
``MT5Attention``, ``Pop2PianoAttention`` and ``SwitchTransformersAttention`` (checked against the installed sources
by ``tests/test_real_transformers_attention.py``). LongT5's local and transient-global attentions and
Pix2Struct's text attention compute something else and are not listed. One finding per instantiation.

**Why**: eager attention materialises the scores and probabilities; ``F.scaled_dot_product_attention`` with
``scale=1.0`` and the position bias (+ mask) as one additive float mask fuses them (flash / memory-efficient
kernels on GPU).

**Example**::

    -        self.SelfAttention = T5Attention(config, has_relative_attention_bias=has_relative_attention_bias)
    +        self.SelfAttention = adopter_kernels.t5_attention_sdpa(T5Attention)(config, has_relative_attention_bias=has_relative_attention_bias)

**Fix safety**: safe for the listed classes as transformers defines them. The factory returns a cached subclass
that inherits ``__init__`` (same arguments, parameters and ``state_dict`` keys, so checkpoints load strictly) and
keeps ``isinstance`` checks true; it returns the same ``(output, present_key_value, position_bias)`` tuple (the
bias still carries gradients to ``relative_attention_bias``) and falls back to the original for
``output_attentions``, a layer head mask, pruned heads, a different ``forward`` signature (with a warning) or
missing attributes. Attention dropout runs only in training; its random draws differ from ``F.dropout``'s.

**Limitations**: guard ``attention_class_fits_drop_in``: a class defined in the file being rewritten (with the
classes of that file it derives from) must have a ``forward`` taking exactly the supported parameters (no decorator,
``*args`` or ``**kwargs``) and set in ``__init__`` every attribute the fast path reads (``q``/``k``/``v``/``o``,
``n_heads``, ``compute_bias``, ``pruned_heads``, ...); otherwise it is refused, since the subclass would only warn
and run the original forward (transformers 4.57's copies, with ``past_key_values``/``cache_position``, are refused
so). Beyond that, classes are recognised by name (an imported class by its name alone): a same-named class whose
forward keeps the signature but computes something else would be rewritten wrongly (review the diff). The supported
forward is transformers 4.34.1's (later versions added ``cache_position``: the factory then warns and keeps the
original computation for an imported class). Only ``self.<attr> = Class(...)`` statements in ``__init__`` are
rewritten; not local variables, ``nn.ModuleList`` elements, builder functions, or calls with ``*args`` /
``**kwargs`` (refused: the arguments cannot be checked). Generated classes are not importable by name, so
``torch.save(model)`` of a whole model cannot pickle them.

**Performance**: measured (docs/KERNEL_PERFORMANCE.md; ``adopter_kernels.backends()`` shows the choice). On CPU the
SDPA core was no faster than T5's eager attention in float32 (0.94-1.01x) and bfloat16 training (0.98-1.05x), so
the subclass runs the original forward there; bfloat16 inference 1.08-1.17x, so SDPA runs there. CUDA: SDPA (or
xformers where timed faster), not yet measured on a GPU.
"""

from .. import codemod


class FuseT5Attention(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "ADP002: instantiate T5Attention (and verbatim copies) as its SDPA subclass."
    RULES = ("ADP002",)
