"""ADP005 FuseDropoutLN — Dropout → residual add → LayerNorm as one fused kernel.

**What**: ``x = drop(a); b = x + r; c = norm(b)`` (also nested: ``norm(drop(a) + r)``, the add written ``r + x``,
across a helper method, inside an ``if`` branch) where ``drop`` is an ``nn.Dropout`` and ``norm`` an
``nn.LayerNorm`` bound in ``__init__``.

**Why**: the three ops read and write the activation three times; the fused kernel does it once (paper §2).

**Example**::

    -        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
    -        self.dropout = nn.Dropout(config.hidden_dropout_prob)
    +        self.LayerNorm = adopter_kernels.FusedDropoutAddLayerNorm(config.hidden_size, eps=config.layer_norm_eps, dropout=config.hidden_dropout_prob)
    ...
    -        hidden_states = self.dropout(hidden_states)
    -        hidden_states = self.LayerNorm(hidden_states + input_tensor)
    +        hidden_states = self.LayerNorm(hidden_states, input_tensor)

**Fix safety**: safe. The fused module subclasses ``nn.LayerNorm`` under the LayerNorm's attribute, so checkpoint
keys are unchanged; dropout runs only in training, drawing random numbers exactly like ``nn.Dropout`` on the
reference path; called with one argument it is a plain LayerNorm, so other uses of the attribute keep working.

**Limitations**: refused when the dropout output or the sum is used anywhere else, when the dropout layer is used
elsewhere (its ``__init__`` statement is removed), when ``inplace=True``, when the layers are bound more than once
in ``__init__``, or when the statements sit in different functions.

**Performance**: measured (docs/KERNEL_PERFORMANCE.md). The fused Triton kernel runs on CUDA only (not yet measured on
a GPU). On CPU the module computes ``layer_norm(dropout(x) + r)`` with torch's ops, the original computation:
0.79-1.11x at BERT-base size (within noise), a few microseconds of dispatch per call (0.73-0.95x on tiny inputs).
"""

from .. import codemod


class FuseDropoutLN(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "ADP005: fuse Dropout -> residual add -> LayerNorm into adopter_kernels.FusedDropoutAddLayerNorm."
    RULES = ("ADP005",)
