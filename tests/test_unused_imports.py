"""The imports a rewrite leaves unused are removed (`adopter_codemods.unused_imports`), and only those: a name the
original never read, one still mentioned (in code, `__all__`, a string annotation), one imported from the project
or under `try`/`if` stays."""

from __future__ import annotations

import libcst as cst

from adopter_codemods.api import rewrite_source
from adopter_codemods.unused_imports import remove_imports_left_unused

ORIGINAL = '''\
"""F and softmax in a docstring do not keep them."""
import os
import torch
import torch.nn.functional as F  # functional API
from torch.nn.functional import softmax, gelu, relu
from .ops import fused
try:
    from torch.nn.functional import silu
except ImportError:
    silu = None

__all__ = ["gelu"]


def f(x: "torch.Tensor") -> "torch.Tensor":
    return F.softmax(x, -1) + softmax(x, dim=-1) + gelu(x) + relu(x) + fused(x) + silu(x) + len(os.sep)
'''


def _rewritten(body: str) -> str:
    new = ORIGINAL.replace(
        "    return F.softmax(x, -1) + softmax(x, dim=-1) + gelu(x) + relu(x) + fused(x) + silu(x) + len(os.sep)\n", body
    )
    return remove_imports_left_unused(cst.parse_module(ORIGINAL), cst.parse_module(new)).code


def test_only_the_names_the_rewrite_stopped_reading_go() -> None:
    code = _rewritten("    return kernels.softmax(x) + kernels.softmax(x) + relu(x)\n")
    # F and softmax: read before, not now (docstring mentions aside); gelu: in __all__; fused: the project's; silu:
    # under `try`; os: not a library the rules rewrite calls of; torch: in the string annotations
    assert "import torch.nn.functional as F" not in code
    assert "from torch.nn.functional import gelu, relu\n" in code
    for kept in ("import os\n", "import torch\n", "from .ops import fused\n", "from torch.nn.functional import silu\n"):
        assert kept in code


def test_nothing_changes_when_every_name_is_still_read() -> None:
    body = "    return F.softmax(x, -1) + softmax(x, dim=-1) + relu(x) + fused(x) + silu(x) + len(os.sep)\n"
    assert _rewritten(body) == ORIGINAL.replace(
        "    return F.softmax(x, -1) + softmax(x, dim=-1) + gelu(x) + relu(x) + fused(x) + silu(x) + len(os.sep)\n", body
    )


def test_a_removed_statement_leaves_its_comments_to_the_next() -> None:
    original = "import torch\n\n# the functional API\nimport torch.nn.functional as F\nx = F.softmax(torch.ones(2), 0)\n"
    new = "import torch\n\n# the functional API\nimport torch.nn.functional as F\nx = k.softmax(torch.ones(2), 0)\n"
    code = remove_imports_left_unused(cst.parse_module(original), cst.parse_module(new)).code
    assert code == "import torch\n\n# the functional API\nx = k.softmax(torch.ones(2), 0)\n"


def test_rewrite_removes_the_functional_import_its_softmax_used() -> None:
    source = (
        "import torch.nn.functional as F\nfrom torch import nn\n\n\nclass M(nn.Module):\n"
        "    def forward(self, x):\n        return F.softmax(x, dim=-1)\n"
    )
    code = rewrite_source(source, ["ADP004"]).code
    assert "import torch.nn.functional as F" not in code and "adopter_kernels.softmax(x, dim=-1)" in code
