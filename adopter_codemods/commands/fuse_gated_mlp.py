"""ADP012 FuseGatedMLP — the gate/up half of a gated MLP as one packed GEMM and a fused ``act(g) * u`` kernel.

**What**: ``act(self.gate(x)) * self.up(x)`` (SwiGLU, GeGLU, ReGLU: LlamaMLP, MistralMLP, Qwen2MLP, GemmaMLP,
T5DenseGatedActDense, ...) where ``self.gate`` and ``self.up`` are ``nn.Linear`` layers (with or without bias) applied
to the same value, nested or as separate statements (``g = act(self.gate(x)); u = self.up(x); h = g * u``), and the
activation is one of three forms, one rule variant each (as in ADP006):

* looked up in ``ACT2FN[config.hidden_act]``;
* a module: ``nn.GELU`` (either approximation), ``nn.ReLU``, ``nn.SiLU``, transformers' ``get_activation(...)``,
  ``GELUActivation``, ``NewGELUActivation``, ``FastGELUActivation``, ``AccurateGELUActivation``,
  ``PytorchGELUTanh``, ``GELUTanh``, ``SiLUActivation``;
* a function: ``F.silu``, ``F.gelu`` (``approximate=`` kept), ``F.relu``, ``torch.relu``, under any import alias.

The down projection around it is left as it is. One finding per product.

**Why**: two GEMMs over the same input become one over ``[W_gate; W_up]`` (the input is read once, one launch),
and the activation and the product are one elementwise kernel instead of two (the activation's output is never
written to memory), forward and backward.

**Example**::

    -        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
    +        down_proj = self.down_proj(adopter_kernels.gated_linear_unit(x, self.gate_proj, self.up_proj, self.act_fn))

**Fix safety**: safe. ``gated_linear_unit(x, gate, up, act, **kw)`` is ``act(gate(x), **kw) * up(x)`` with the very
modules and function the model holds (its reference path, taken on CPU, is that expression); the packed path runs
only for plain ``nn.Linear`` layers of one dtype and equal ``out_features`` and for activations recognised exactly
at run time (``config.hidden_act`` may be any callable; never one GELU for the other). No module is added or
removed, so ``state_dict`` keys do not change. The packed GEMM may differ from two GEMMs in the last bits.

**Limitations**: refused when an intermediate (the gate's or up's output, the activation's output) is used anywhere
else, when the two Linears read different values, when the product is written ``up(x) * act(gate(x))`` (the
pattern follows evaluation order), for other activations (``nn.Tanh``, ``QuickGELUActivation``), for a positional
argument of the activation besides its input (``F.silu(h, True)``), for layers inside ``nn.Sequential``, and for
already packed projections (``gate_up_proj`` then ``chunk``: Phi-3). Rules apply in code order, so under AdoptAll a
*biased* gate Linear whose activation ADP006 matches too is fused by ADP006 (bias + activation) and the product is
then left as it is (both rewrites are exact; ADP012 alone gives the bigger fusion).

**Performance**: measured (docs/KERNEL_PERFORMANCE.md, run D). The packed GEMM and fused ``act(g) * u`` kernel run on
CUDA only (not yet measured on a GPU). On CPU ``gated_linear_unit`` computes ``act(gate(x)) * up(x)`` itself: within
noise at base size (0.98-1.06x) plus a few microseconds of dispatch per call (small inputs: 0.84-0.94x, 0.93x
`slower` in bfloat16 inference).
"""

from .. import codemod


class FuseGatedMLP(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "ADP012: compute act(gate(x)) * up(x) as adopter_kernels.gated_linear_unit (one GEMM, fused act*mul)."
    RULES = ("ADP012",)
