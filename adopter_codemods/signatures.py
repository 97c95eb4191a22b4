"""Constructor and function signatures the matcher needs to line up positional and keyword arguments.

A pattern ``torch.nn.Dropout(p=$p, inplace=False)`` must match ``nn.Dropout(0.1)``, ``nn.Dropout(p=0.1)`` and
``nn.Dropout()`` (p defaults to 0.5). Only the parameters a rule may name are listed; a layer missing here is
matched by position (``0``, ``1``, ...) and keyword as written.
"""

from __future__ import annotations

from typing import Optional

# name -> ((parameter, default source text or None when required), ...) in positional order
SIGNATURES: dict[str, tuple[tuple[str, Optional[str]], ...]] = {
    "torch.nn.Dropout": (("p", "0.5"), ("inplace", "False")),
    "torch.nn.LayerNorm": (
        ("normalized_shape", None),
        ("eps", "1e-05"),
        ("elementwise_affine", "True"),
        ("bias", "True"),
        ("device", "None"),
        ("dtype", "None"),
    ),
    "torch.nn.Linear": (
        ("in_features", None),
        ("out_features", None),
        ("bias", "True"),
        ("device", "None"),
        ("dtype", "None"),
    ),
    "torch.nn.Conv2d": (
        ("in_channels", None),
        ("out_channels", None),
        ("kernel_size", None),
        ("stride", "1"),
        ("padding", "0"),
        ("dilation", "1"),
        ("groups", "1"),
        ("bias", "True"),
        ("padding_mode", "'zeros'"),
        ("device", "None"),
        ("dtype", "None"),
    ),
    "torch.nn.BatchNorm2d": (
        ("num_features", None),
        ("eps", "1e-05"),
        ("momentum", "0.1"),
        ("affine", "True"),
        ("track_running_stats", "True"),
        ("device", "None"),
        ("dtype", "None"),
    ),
    "torch.nn.BatchNorm1d": (
        ("num_features", None),
        ("eps", "1e-05"),
        ("momentum", "0.1"),
        ("affine", "True"),
        ("track_running_stats", "True"),
        ("device", "None"),
        ("dtype", "None"),
    ),
    "torch.nn.GELU": (("approximate", "'none'"),),
    "torch.nn.ReLU": (("inplace", "False"),),
    "torch.nn.SiLU": (("inplace", "False"),),
    "torch.nn.Softmax": (("dim", "None"),),
    "torch.nn.functional.softmax": (("input", None), ("dim", "None"), ("_stacklevel", "3"), ("dtype", "None")),
    "torch.nn.functional.gelu": (("input", None), ("approximate", "'none'")),
    "torch.softmax": (("input", None), ("dim", None), ("dtype", "None")),
    "torch.Tensor.softmax": (("self", None), ("dim", None), ("dtype", "None")),
    # ADP004's drop-ins, so ADP010 still matches a core whose softmax ADP004 rewrote first (AdoptAll)
    "adopter_kernels.softmax": (("input", None), ("dim", "None"), ("_stacklevel", "3"), ("dtype", "None")),
    "adopter_kernels.torch_softmax": (("input", None), ("dim", None), ("dtype", "None")),
    "adopter_kernels.tensor_softmax": (("input", None), ("dim", None), ("dtype", "None")),
    "torch.Tensor.masked_fill": (("self", None), ("mask", None), ("value", None)),
    "torch.Tensor.transpose": (("self", None), ("dim0", None), ("dim1", None)),
    "torch.nn.functional.dropout": (("input", None), ("p", "0.5"), ("training", "True"), ("inplace", "False")),
    "torch.matmul": (("input", None), ("other", None)),
    "torch.bmm": (("input", None), ("mat2", None)),
    "torch.nn.functional.relu": (("input", None), ("inplace", "False")),
    "torch.nn.functional.silu": (("input", None), ("inplace", "False")),
}


def default_source(qualname: str, param: str) -> Optional[str]:
    for name, default in SIGNATURES.get(qualname, ()):
        if name == param:
            return default
    return None
