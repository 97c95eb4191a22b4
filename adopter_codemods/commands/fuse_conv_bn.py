"""ADP007 FuseConvBN — ``Conv2d`` → ``BatchNorm2d`` as one conv: exact in training, BN folded into it in eval.

**What**: ``y = self.conv(x); z = self.bn(y)`` (also nested ``self.bn(self.conv(x))``, in a helper method that
forward calls, in a loop body) where ``self.conv`` is an ``nn.Conv2d`` and ``self.bn`` an ``nn.BatchNorm2d`` bound in
``__init__``; adjacent ``Conv2d``, ``BatchNorm2d`` elements of an ``nn.Sequential`` that forward calls; and the
paper's DPT case, the BatchNorm under an ``if`` right after the conv (§3.2 Fig. 3, §3.5 Fig. 4–5): the fused call
goes into the branch and the conv is copied into the other branch (a new ``else`` or the existing one).
One finding per conv/BN pair.

The layer types may come from anywhere ``__init__`` (or a method it calls) builds them: module-level factories
(``conv3x3(...)`` returning ``nn.Conv2d(...)``), a ``norm_layer`` parameter defaulting to ``nn.BatchNorm2d`` or set
by ``if norm_layer is None: norm_layer = nn.BatchNorm2d`` / ``norm_layer or nn.BatchNorm2d``,
``functools.partial(nn.BatchNorm2d, ...)``. Containers too: an ``nn.Sequential`` built from a list (``append``,
``extend``, ``+=``, ``*layers``) or an ``OrderedDict``, built in any method or module-level function (ResNet's
``_make_layer`` downsample), and a subclass of ``nn.Sequential`` without a ``forward`` of its own that calls
``super().__init__(*layers)`` (torchvision's ``ConvNormActivation``: the class then derives from
``FusedSequential``).

**Why**: in inference a BatchNorm after a conv is an affine map per channel, so it folds into the conv's weights and
bias: one conv instead of a conv plus a full read and write of its output (paper Table 1 rule 7; epoi never shipped
the ``FusedConv2dBatchNorm2d`` the paper names).

**Example**::

    -        hidden_state = self.convolution1(hidden_state)
    -
             if self.use_batch_norm:
    -            hidden_state = self.batch_norm1(hidden_state)
    +            hidden_state = adopter_kernels.conv_bn2d(hidden_state, self.convolution1, self.batch_norm1)
    +        else:
    +            hidden_state = self.convolution1(hidden_state)

    -        self.head = nn.Sequential(
    +        self.head = adopter_kernels.FusedSequential(
                 nn.Conv2d(features, features, kernel_size=3, padding=1, bias=False),
                 nn.BatchNorm2d(features),

**Fix safety**: safe, including *guarded* sites (reported with ``certainty: "guarded"``), where a layer's type is
only possible: ``norm_layer(planes)`` is a BatchNorm2d unless a caller passes another norm. The rewrite is correct
for any modules because ``conv_bn2d`` and ``FusedSequential`` check them at run time: only an ``nn.Conv2d`` and an
``nn.BatchNorm2d`` whose classes override nothing the computation goes through (``forward``, ``_conv_forward``,
``_check_input_dim``, ``__call__``), or timm's ``BatchNormAct2d`` (its forward's text verified), without forward
or backward hooks are folded; a GroupNorm, a subclass with its own forward, a hooked module run ``bn(conv(x))``
as written. ``conv_bn2d(x, conv, bn)`` is ``bn(conv(x))`` on the model's own layers: in training, and
whenever folding would not be exact (BN without running statistics, overriding subclasses or hooks, a layer that
is not a ``Conv2d``/``BatchNorm2d`` at run time, unbatched input), it runs the two layers literally (batch statistics
and running-stat updates as before); in eval it runs one conv with ``w·γ/√(var+ε)`` and the folded bias (conv bias
or none, BN with or without affine parameters). Results then match up to float rounding (≈1e-6). Both layers stay
in ``__init__`` and ``FusedSequential`` keeps the children, so ``state_dict`` keys are unchanged and other uses of
the layers keep working.

**Limitations**: refused when the conv output is used anywhere else (a residual taken before the BN), when
anything runs between them (``conv → relu → bn``), when the conv input is rebound or touched by a call in between
(it is read again at the BN), when the BN is in a loop and the conv outside it, for ``if``/``elif`` chains and
``if`` tests that read the conv output or make calls, and for other layer types (``Conv1d``/``Conv3d``,
``ConvTranspose2d``, frozen or custom BatchNorm classes), and where no type of the pair is named in the code (a
``norm_layer`` parameter without default, timm's ``get_norm_act_layer(...)`` / ``create_conv2d(...)``: unknown
types are never matched). A factory is read only when its body is one ``return Layer(...)``. Elements of a list
that is passed to anything but ``append``/``extend``/``+=``/``nn.Sequential(*layers)`` (it may be reordered) are
not followed, nor are elements appended in different arms of an ``if`` (or a loop body and what follows it)
paired; ``nn.ModuleList`` subclasses (their own ``forward`` loops over the children) are left alone.

**Performance**: measured (docs/KERNEL_PERFORMANCE.md). Folding BN into the conv was within noise of conv + BN on CPU
(0.78-1.06x at ResNet-18's 64-channel 56x56 layer and small sizes, float32 and bfloat16, never faster), so on CPU
``conv_bn2d`` runs ``bn(conv(x))``; on CUDA it folds in eval (not yet measured on a GPU).
"""

from .. import codemod


class FuseConvBN(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "ADP007: run Conv2d -> BatchNorm2d as adopter_kernels.conv_bn2d (BatchNorm folded in eval)."
    RULES = ("ADP007",)
