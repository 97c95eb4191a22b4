"""ADP008 FuseLinearBN — ``Linear`` → ``BatchNorm1d`` as one linear: exact in training, BN folded into it in eval.

**What**: ``y = self.fc(x); z = self.bn(y)`` (also nested ``self.bn(self.fc(x))``, in a helper method that forward
calls, with the BatchNorm under an ``if``) where ``self.fc`` is an ``nn.Linear`` and ``self.bn`` an
``nn.BatchNorm1d`` bound in ``__init__``, and adjacent ``Linear``, ``BatchNorm1d`` elements of an ``nn.Sequential``
that forward calls (GroupViT's projection heads). One finding per linear/BN pair. Layer types built by factories,
``norm_layer`` parameters, ``functools.partial`` and containers built from lists or as ``nn.Sequential``
subclasses (torchvision's ``ops.MLP``) are followed as for ADP007.

**Why**: in inference a BatchNorm after a linear layer is an affine map per feature, so it folds into the linear's
weight and bias: one GEMM instead of a GEMM plus a full read and write of its output (paper Table 1 rule 8; the
paper's ``torch.nn.intrinsic.qat.LinearBn1d`` is a fake-quantising QAT module, not a speed kernel).

**Example**::

    -        h = self.fc(features)
    -        h = self.bn(h)
    +        h = adopter_kernels.linear_bn1d(features, self.fc, self.bn)

    -        self.visual_projection = nn.Sequential(
    +        self.visual_projection = adopter_kernels.FusedSequential(
                 nn.Linear(self.vision_embed_dim, self.projection_intermediate_dim, bias=True),
                 nn.BatchNorm1d(self.projection_intermediate_dim),

**Fix safety**: safe, including *guarded* sites (``certainty: "guarded"``: a ``norm_layer`` that is a BatchNorm1d
unless a caller passes another): ``linear_bn1d`` and ``FusedSequential`` fold only an ``nn.Linear`` and an
``nn.BatchNorm1d`` whose classes override nothing the computation goes through, without hooks, and run
``bn(linear(x))`` for any other modules. ``linear_bn1d(x, linear, bn)`` is ``bn(linear(x))`` on the model's own layers: in training,
on input that is not (N, C) (for (N, C, L) BatchNorm1d normalises dim 1, not the linear's output features), and
whenever folding would not be exact (BN without running statistics, subclasses or hooks), it runs the two layers
literally; in eval on (N, C) input it runs one linear with folded weights, equal up to float rounding (≈1e-6).
Both layers stay in ``__init__`` and ``FusedSequential`` keeps the children, so ``state_dict`` keys are unchanged.

**Limitations**: refused when the linear output is used anywhere else, when anything runs between them (LeViT's
``bn(h.flatten(0, 1))``), when the linear input is rebound or touched by a call in between, for ``if``/``elif``
chains, for ``BatchNorm1d → Linear``, for ``Conv1d → BatchNorm1d`` and where the code names no candidate type.
The same ``nn.Sequential`` restrictions as ADP007 apply.

**Performance**: measured (docs/KERNEL_PERFORMANCE.md). Folding BN into the linear layer was within noise of
linear + BN on CPU (0.72-1.20x at GroupViT's 768 -> 4096 projection and small sizes, never faster), so on CPU
``linear_bn1d`` runs ``bn(linear(x))``; on CUDA it folds in eval (not yet measured on a GPU).
"""

from .. import codemod


class FuseLinearBN(codemod.AdopterCodemod):
    __doc__ = __doc__
    DESCRIPTION = "ADP008: run Linear -> BatchNorm1d as adopter_kernels.linear_bn1d (BatchNorm folded in eval)."
    RULES = ("ADP008",)
