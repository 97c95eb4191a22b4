"""ADP005 FuseDropoutLN — Dropout → residual add → LayerNorm as one fused kernel.

**What**: ``x = drop(a); b = x + r; c = norm(b)`` (also nested: ``norm(drop(a) + r)``, the add written ``r + x``,
across a helper method, inside an ``if`` branch) where ``drop`` is an ``nn.Dropout`` and ``norm`` an
``nn.LayerNorm`` bound in ``__init__`` (post-LN, BERT's ``SelfOutput``). Also pre-LN blocks, where the sum is the
residual stream the block adds to again after the LayerNorm (``x = x + drop(a); h = ln(x)``, ``x`` read later):
with an ``nn.Dropout`` module or ``F.dropout(a, p=..., training=...)`` (the Bart-family layers' functional dropout).

**Why**: the three ops read and write the activation three times; the fused kernel does it once (paper §2). A
pre-LN block needs the sum too, so its kernel writes both the normalised output and the sum (as fused
dropout-add-LayerNorm kernels with a residual-out / pre-norm flag do).

**Example**::

    -        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
    -        self.dropout = nn.Dropout(config.hidden_dropout_prob)
    +        self.LayerNorm = adopter_kernels.FusedDropoutAddLayerNorm(config.hidden_size, eps=config.layer_norm_eps, dropout=config.hidden_dropout_prob)
    ...
    -        hidden_states = self.dropout(hidden_states)
    -        hidden_states = self.LayerNorm(hidden_states + input_tensor)
    +        hidden_states = self.LayerNorm(hidden_states, input_tensor)

    pre-LN (OneFormer's decoder layer ``forward_pre``)::

    -        output = output + self.dropout1(output2)
    -        output2 = self.norm2(output)
    +        output2, output = adopter_kernels.dropout_add_layer_norm_residual(output2, output, self.norm2, self.dropout1)

**Fix safety**: safe. Post-LN: the fused module subclasses ``nn.LayerNorm`` under the LayerNorm's attribute, so
checkpoint keys are unchanged; dropout runs only in training, drawing random numbers exactly like ``nn.Dropout`` on
the reference path; called with one argument it is a plain LayerNorm, so other uses of the attribute keep working.
Pre-LN: ``__init__`` is untouched; ``dropout_add_layer_norm_residual(a, r, norm, drop)`` returns
``(norm(drop(a) + r), drop(a) + r)`` and its reference path calls the model's own modules (or ``F.dropout`` with
the call's ``p`` and ``training``), so outputs, gradients and the random numbers drawn are the original's; the
Triton path takes only plain ``nn.LayerNorm``/``nn.Dropout`` modules without hooks. The two outputs are assigned to
the names the sum and the LayerNorm's output had (``h, x = ...``).

**Limitations**: post-LN is refused when the dropout output is used anywhere else, when the dropout layer is used
elsewhere (its ``__init__`` statement is removed), when ``inplace=True``, when the layers are bound more than once
in ``__init__``, or when the statements sit in different functions. Pre-LN is matched only where the sum is read
after the LayerNorm and the two go to different names, and where nothing between the add and the LayerNorm reads
the sum: the Whisper/MBart form that copies it first (``h = residual + h; residual = h; h = ln(h)``) is refused.
Stochastic depth (``drop_path``, timm/Swin) is no ``nn.Dropout`` and is not matched.

**Performance**: measured (docs/KERNEL_PERFORMANCE.md). The fused Triton kernel runs on CUDA only (not yet measured on
a GPU; the pre-LN variant is checked with Triton's CPU interpreter). On CPU the module computes
``layer_norm(dropout(x) + r)`` with torch's ops, the original computation: 0.79-1.11x at BERT-base size (within
noise), a few microseconds of dispatch per call (0.73-0.95x on tiny inputs).
"""

from .. import codemod


class FuseDropoutLN(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "ADP005: fuse Dropout -> residual add -> LayerNorm (post-LN and pre-LN) into one adopter_kernels kernel."
    RULES = ("ADP005",)
