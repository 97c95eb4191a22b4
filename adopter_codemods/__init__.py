"""adopter_codemods: bring optimized deep-learning kernels into PyTorch model source code (Adopter, ISSTA 2024).

The codemod classes are importable from the package root (``adopter_codemods.FuseDropoutLN``) for
``python -m libcst.tool codemod -x adopter_codemods.<Name>``; they load lazily so ``import adopter_codemods`` stays
cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# codemod class -> module under adopter_codemods.commands
CODEMODS: dict[str, str] = {
    "FuseBertSelfAttention": "fuse_bert_self_attention",
    "FuseT5Attention": "fuse_t5_attention",
    "FuseGPT2Attention": "fuse_gpt2_attention",
    "FuseDropoutLN": "fuse_dropout_ln",
    "FastSoftmax": "fast_softmax",
    "FuseBiasGeLU": "fuse_bias_gelu",
    "FuseConvBN": "fuse_conv_bn",
    "FuseLinearBN": "fuse_linear_bn",
    "FuseQKV": "fuse_qkv",
    "FuseAttentionCore": "fuse_attention_core",
    "FuseRMSNorm": "fuse_rms_norm",
    "FuseGatedMLP": "fuse_gated_mlp",
    "FuseRotaryEmbedding": "fuse_rotary_embedding",
    "AdoptAll": "adopt_all",
    "ApplyRuleFiles": "apply_rule_files",
}


def __getattr__(name: str) -> Any:
    module = CODEMODS.get(name)
    if module is None:
        raise AttributeError(f"module 'adopter_codemods' has no attribute {name!r}")
    return getattr(importlib.import_module(f"adopter_codemods.commands.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *CODEMODS])
