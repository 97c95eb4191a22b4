"""ADP001 FuseBertSelfAttention — BertSelfAttention (and its verbatim copies) with SDPA as its attention core.

**What**: ``self.<attr> = BertSelfAttention(...)`` in an ``nn.Module``'s ``__init__`` (the class imported under
any name or module path, or defined in the same file), and the same for the transformers 4.34.1 classes "Copied
from" BertSelfAttention whose ``__init__`` and ``forward`` are identical up to the class-name prefix:
AlignText, AltRoberta, BertGeneration, BridgeTower, Camembert, ChineseCLIPText, ClapText, Data2VecText, Electra,
Ernie, LayoutLM, MarkupLM, MegatronBert, Realm, RoCBert, RobertaPreLayerNorm, Roberta, Splinter, XLMRoberta,
XLMRobertaXL and Xmod ``...SelfAttention`` (``tests/test_real_transformers_attention.py`` checks the list against
the installed sources). Copies that changed the computation (ErnieM, Esm, Nezha, the ViT family, ...) are not
listed. One finding per instantiation.

**Why**: eager attention materialises the scores and probabilities; ``F.scaled_dot_product_attention`` fuses
matmul, mask, softmax and dropout (flash / memory-efficient kernels on GPU).

**Example**::

    -        self.self = BertSelfAttention(config, position_embedding_type=position_embedding_type)
    +        self.self = adopter_kernels.bert_self_attention_sdpa(BertSelfAttention)(config, position_embedding_type=position_embedding_type)

**Fix safety**: safe for the listed classes as transformers defines them. The factory returns a cached subclass
that inherits ``__init__`` (same arguments, parameters and ``state_dict`` keys, so checkpoints load strictly) and
keeps ``isinstance`` checks true; its forward falls back to the original for ``output_attentions``, a head mask,
relative position embeddings, a different ``forward`` signature (with a warning) or missing attributes. Dropout
runs only in training; its random draws differ from ``nn.Dropout``'s (same distribution).

**Limitations**: guard ``attention_class_fits_drop_in``: a class defined in the file being rewritten (with the
classes of that file it derives from) must have a ``forward`` taking exactly the supported parameters (no decorator,
``*args`` or ``**kwargs``) and set in ``__init__`` every attribute the fast path reads (``query``/``key``/``value``,
``num_attention_heads``, ``position_embedding_type``, ``is_decoder``, ...); otherwise it is refused, since the
subclass would only warn and run the original forward (transformers 4.57's copies, with
``past_key_values``/``cache_position``, are refused so). Beyond that, classes are recognised by name (an imported class
by its name alone): a same-named class whose forward keeps the signature but computes something else would be
rewritten wrongly (review the diff). A subclass under another name is not rewritten (it may override forward). Only
``self.<attr> = Class(...)`` statements in ``__init__`` are rewritten; not local variables, ``nn.ModuleList``
elements, builder functions, or calls with ``*args`` / ``**kwargs`` (refused: the arguments cannot be checked).
Generated classes are not importable by name, so ``torch.save(model)`` of a whole model cannot pickle them
(``state_dict`` checkpoints work).

**Performance**: measured (docs/KERNEL_PERFORMANCE.md; ``adopter_kernels.backends()`` shows the choice). On CPU the
SDPA core ran 1.06-1.31x the speed of the eager attention in float32 at BERT-base and small sizes (quieter run;
never measured slower) and 1.12-1.16x in bfloat16 inference, so it runs there; bfloat16 training was 0.94-1.10x
(slower at BERT-base size), so the subclass runs the original forward there. CUDA: SDPA (or xformers where
timed faster), not yet measured on a GPU.
"""

from .. import codemod


class FuseBertSelfAttention(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "ADP001: instantiate BertSelfAttention (and verbatim copies) as its SDPA subclass."
    RULES = ("ADP001",)
