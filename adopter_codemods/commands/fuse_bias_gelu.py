"""ADP006 FuseBiasGeLU — a biased ``Linear`` followed by its activation as one fused bias+activation kernel.

**What**: ``h = self.dense(x); y = self.act(h)`` (also nested ``self.act(self.dense(x))``, across a helper method,
with the activation under an ``if``) where ``self.dense`` is an ``nn.Linear`` with ``bias=True`` (the default) and
the activation is one of three forms, one rule variant each:

* looked up in ``ACT2FN[config.hidden_act]`` (BertIntermediate, ViTIntermediate, CLIPMLP, GPTNeoMLP, Whisper);
  HF's ``if isinstance(config.hidden_act, str): ... else: self.act = config.hidden_act`` binds the attribute
  twice, and the ACT2FN binding is enough;
* an activation module: ``nn.GELU`` (either approximation), ``nn.ReLU``, ``nn.SiLU``, transformers'
  ``get_activation(...)``, ``GELUActivation``, ``NewGELUActivation``, ``FastGELUActivation``,
  ``AccurateGELUActivation``, ``PytorchGELUTanh``, ``SiLUActivation``;
* a function: ``F.gelu`` (``approximate=`` kept), ``F.relu``, ``F.silu``, ``torch.relu``, under any import
  alias; the fused call names the function as the user wrote it and passes keyword arguments through.

One finding per Linear/activation pair.

**Why**: the Linear writes ``x @ W.T + b`` and the activation reads it back; the fused kernel adds the bias inside
the activation (forward and backward), saving one read and one write of the activation tensor (paper Table 1
rule 6, epoi's FusedBiasGELU).

**Example**::

    -        hidden_states = self.dense(hidden_states)
    -        hidden_states = self.intermediate_act_fn(hidden_states)
    +        hidden_states = adopter_kernels.linear_bias_activation(hidden_states, self.dense, self.intermediate_act_fn)

    -        h = nn.functional.gelu(self.fc(x), approximate="tanh")
    +        h = adopter_kernels.linear_bias_activation(x, self.fc, nn.functional.gelu, approximate="tanh")

**Fix safety**: safe. ``linear_bias_activation(x, linear, act, **kw)`` is ``act(linear(x), **kw)`` with the very
modules and function the model holds, so the function computed is the original one whatever the activation turns
out to be at runtime (``config.hidden_act`` may be any callable); the fused kernel is used only for activations it
recognises exactly (erf GELU, tanh GELU, ReLU, SiLU; never one GELU for the other, unlike epoi's tanh-only
kernel). No module is added or removed, so ``state_dict`` keys do not change.

**Limitations**: refused when the Linear's output is used anywhere else (a residual, a second head), when the
activation's input is redefined in between, when the Linear has ``bias=False`` or a bias that is not literally
``True`` (``bias=config.enable_bias``: OPT, LLaMA), when the activation takes a positional argument besides its
input (``F.relu(h, True)``: it would bind another parameter of the fused call) or unpacked arguments, for other
activations (``nn.Tanh``, ``QuickGELUActivation``: no fused kernel, nothing to gain), for Linear -> Dropout ->
activation, for layers inside ``nn.Sequential``, and for GPT-2's ``Conv1D``. The rule's variants are the same
fusion in three source forms; a site is reported once.

**Performance**: measured (docs/KERNEL_PERFORMANCE.md). The fused bias+activation Triton kernel runs on CUDA only
(not yet measured on a GPU). On CPU ``linear_bias_activation`` computes ``act(linear(x))``, the original
computation: 0.94-1.00x at BERT-base size (768 -> 3072), a few microseconds of dispatch per call on tiny inputs.
"""

from .. import codemod


class FuseBiasGeLU(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "ADP006: fuse a biased Linear and its activation into adopter_kernels.linear_bias_activation."
    RULES = ("ADP006",)
