"""Generated model sources shared by the tests and the benchmarks (benchmarks/bench_paths.py)."""

from __future__ import annotations


def branchy_class(k: int) -> str:
    """k sequential ifs (2**k paths), each holding a softmax site (ADP004) and a dropout-add-LayerNorm (ADP005)."""
    branches = "".join(
        f"        if flags[{i}]:\n"
        f"            s{i} = F.softmax(x * {i + 1}, dim=-1)\n"
        f"            x = self.ln(self.drop(s{i}) + x)\n"
        for i in range(k)
    )
    return (
        "import torch.nn.functional as F\nfrom torch import nn\n\n\n"
        "class Branchy(nn.Module):\n"
        "    def __init__(self, d):\n"
        "        super().__init__()\n"
        "        self.drop = nn.Dropout(0.1)\n"
        "        self.ln = nn.LayerNorm(d)\n\n"
        "    def forward(self, x, flags):\n"
        f"{branches}"
        "        return x\n"
    )
