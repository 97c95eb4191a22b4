"""ADP011 FuseRMSNorm — a hand-written RMSNorm class with one fused RMSNorm kernel as its forward.

**What**: ``self.<attr> = Norm(...)`` in an ``nn.Module``'s ``__init__`` where ``Norm`` is a class defined once at
the top of the same file, deriving from ``nn.Module`` only, whose ``forward`` is exactly one of three RMSNorms
(any class and parameter names, any import alias of ``torch``; ``__init__`` and ``extra_repr`` may be anything):

* LLaMA casting (LlamaRMSNorm, MistralRMSNorm, Qwen2RMSNorm, IdeficsRMSNorm's decoder copies, ...)::

      input_dtype = x.dtype
      x = x.to(torch.float32)
      variance = x.pow(2).mean(-1, keepdim=True)
      x = x * torch.rsqrt(variance + self.variance_epsilon)
      return self.weight * x.to(input_dtype)

* T5 casting (T5LayerNorm, Pix2StructLayerNorm, IdeficsRMSNorm, ...): variance of ``x.to(torch.float32)``,
  ``x * rsqrt(...)``, ``if self.weight.dtype in [torch.float16, torch.bfloat16]: x = x.to(self.weight.dtype)``,
  ``return self.weight * x``;
* Gemma casting (GemmaRMSNorm): ``_norm(x) = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)``,
  ``output = self._norm(x.float()) * (1.0 + self.weight.float())``, ``return output.type_as(x)``.

The eps attribute may be ``variance_epsilon`` or ``eps`` (LLaMA and T5 casting; ``eps`` for Gemma), the weight is
``weight``. The class is recognised by the structure of its forward, not by its name (the rule's guard
``rms_norm_class_is_exact`` compares ASTs with locals renamed and imports resolved). One finding per instantiation.

**Why**: eager RMSNorm launches five to eight kernels (cast, pow, mean, add, rsqrt, mul, cast, mul) and writes the
intermediates; the fused kernel reads the row once and writes the result once (what Liger-Kernel and the HF kernel
hub patch in at run time, for an allow-list of architectures only).

**Example**::

    -        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
    +        self.input_layernorm = adopter_kernels.rms_norm_module(LlamaRMSNorm, 'llama', 'weight', 'variance_epsilon')(config.hidden_size, eps=config.rms_norm_eps)

**Fix safety**: safe for the classes the guard accepts. ``rms_norm_module`` returns a cached subclass that inherits
``__init__`` (same arguments, parameters and ``state_dict`` keys; ``isinstance`` checks stay true) and whose
forward is ``adopter_kernels.rms_norm(x, self.weight, self.<eps>, cast)``; its reference path is the original
expression in the original casting order (a float64 input is still normalised in float32 where the original
does so). The Triton path (CUDA, inference, weight in the input's dtype) accumulates in float32 and may differ from
eager in the last bit of half precision.

**Limitations**: refused when the class name is bound anywhere else in the file (T5's
``T5LayerNorm = FusedRMSNorm`` under ``try``), when the class has other bases, decorators (except transformers'
``use_kernel_forward_from_hub`` marker), class attributes or methods besides ``__init__``/``extra_repr``/the
template's, and for any other RMSNorm spelling (CpmAnt's ``(x * rsqrt(...)).to(dtype) * weight``, ``.float()``
for ``.to(torch.float32)``, ``torch.mean(...)``, Mega's scale norms). Classes imported from another file are not
judged (the guard cannot read them). Only ``self.<attr> = Norm(...)`` statements in ``__init__`` are rewritten; not
local variables, ``nn.ModuleList`` elements or calls with ``*args``/``**kwargs``. The generated subclass is not
importable by name, so ``torch.save(model)`` of a whole model cannot pickle it (``state_dict`` checkpoints work).

**Performance**: measured (docs/KERNEL_PERFORMANCE.md, run D). The Triton row kernel runs on CUDA only (not yet
measured on a GPU). On CPU ``rms_norm`` computes the original expression itself: within noise at base size
(0.85-1.02x) plus a few microseconds of dispatch per call, visible on small inputs (0.92x `slower` in bfloat16
inference).
"""

from .. import codemod


class FuseRMSNorm(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "ADP011: instantiate a hand-written RMSNorm class as its fused-kernel subclass."
    RULES = ("ADP011",)
