"""ADP009 FuseQKV with projections nested in larger expressions: plan "hoist" (adopter_codemods/hoist.py).

The packed outputs are bound to fresh names in a new statement before the first projection's statement, and each
projection becomes its name in place. Checked here beyond the golden fixtures (tests/test_fixtures.py): the
fixtures' equivalence with the packed GEMM itself (on CPU `packed_qkv_linear` otherwise applies the three Linears),
the text of the new statement, and real models: transformers 4.34.1 in this process, 4.57.6 and 5.23.0 in a
subprocess (tests/qkv_real.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from adopter_codemods.api import rewrite_source
from conftest import FIXTURES, expected_path, is_negative

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parent.parent
POSITIVE = sorted(c for c in (FIXTURES / "ADP009_fuse_qkv").glob("*.py") if not c.name.endswith(".expected.py") and not is_negative(c))


@pytest.mark.parametrize("case", POSITIVE, ids=[c.stem for c in POSITIVE])
def test_fixture_equivalent_with_the_packed_gemm(case: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import adopter_kernels
    from adopter_kernels import qkv
    from adopter_kernels.equivalence import assert_equivalent, load_source_as_module

    stem = f"qkv_packed_{case.stem}"
    original = load_source_as_module(case.read_text(encoding="utf-8"), stem + "_original", path=str(case))
    rewritten = load_source_as_module(expected_path(case).read_text(encoding="utf-8"), stem + "_rewritten")
    packs = []
    pack = qkv._pack
    monkeypatch.setattr(qkv, "_pack", lambda *layers: packs.append(layers) or pack(*layers))
    with adopter_kernels.use_backend("packed_qkv_linear=packed"):
        assert_equivalent(original, rewritten)
    assert packs, "the packed GEMM did not run"


def _forward(code: str) -> str:
    return code[code.index("def forward") :]


def _rewrite(source: str) -> str:
    result = rewrite_source(source, ["ADP009"])
    assert result.findings, "expected a match"
    return result.code


HEADER = """import torch
from torch import nn


class A(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q = nn.Linear(d, 8)
        self.k = nn.Linear(d, 8)
        self.v = nn.Linear(d, 8)

"""


def test_new_statement_takes_the_comments_before_the_first_projection() -> None:
    source = HEADER + """    def forward(self, x):
        n = x.size(0)

        # the three projections
        q = self.q(x).view(n, -1, 2, 4)
        k = self.k(x).view(n, -1, 2, 4)  # keys
        v = self.v(x).view(n, -1, 2, 4)
        return q, k, v
"""
    assert _forward(_rewrite(source)) == """def forward(self, x):
        n = x.size(0)

        # the three projections
        q_out, k_out, v_out = adopter_kernels.packed_qkv_linear(x, self.q, self.k, self.v)
        q = q_out.view(n, -1, 2, 4)
        k = k_out.view(n, -1, 2, 4)  # keys
        v = v_out.view(n, -1, 2, 4)
        return q, k, v
"""


def test_whole_first_projection_keeps_its_name_and_place_on_a_shared_line() -> None:
    source = HEADER + """    def forward(self, x):
        n = x.size(0); q = self.q(x)
        k = self.k(x).view(n, -1, 2, 4)
        return q, k, self.v(x)
"""
    assert _forward(_rewrite(source)) == """def forward(self, x):
        n = x.size(0); q, k_out, v_out = adopter_kernels.packed_qkv_linear(x, self.q, self.k, self.v)
        k = k_out.view(n, -1, 2, 4)
        return q, k, v_out
"""


def test_annotated_first_projection_gets_a_new_statement() -> None:
    source = HEADER + """    def forward(self, x):
        q: torch.Tensor = self.q(x)
        return q, self.k(x).t(), self.v(x).t()
"""
    assert _forward(_rewrite(source)) == """def forward(self, x):
        q_out, k_out, v_out = adopter_kernels.packed_qkv_linear(x, self.q, self.k, self.v)
        q: torch.Tensor = q_out
        return q, k_out.t(), v_out.t()
"""


def test_whole_statements_keep_the_tuple_assignment() -> None:
    source = HEADER + """    def forward(self, x):
        q = self.q(x)
        k = self.k(x)
        v = self.v(x)
        return q, k, v
"""
    assert "q, k, v = adopter_kernels.packed_qkv_linear(x, self.q, self.k, self.v)\n" in _rewrite(source)


@pytest.mark.parametrize("line, expected", [
    # LLaMA's reference code: the packed call takes the statement's place and its names
    ("q, k, v = self.q(x), self.k(x), self.v(x)", "q, k, v = adopter_kernels.packed_qkv_linear(x, self.q, self.k, self.v)\n"),
    ("k, q, v = self.k(x), self.q(x), self.v(x)", "k, q, v = adopter_kernels.packed_qkv_linear(x, self.k, self.q, self.v)\n"),
    # more than the projections: they get names of their own, the statement reads them
    ("q, k, v, y = self.q(x), self.k(x), self.v(x), x", "q_out, k_out, v_out = adopter_kernels.packed_qkv_linear(x, self.q, self.k, self.v)\n"),
])
def test_one_tuple_assignment_of_the_projections(line: str, expected: str) -> None:
    source = HEADER + f"""    def forward(self, x):
        {line}
        return q.view(*x.shape[:-1], 2, 4), k, v
"""
    assert expected in _rewrite(source)


def test_input_defined_on_the_first_projections_line_is_refused() -> None:
    source = HEADER + """    def forward(self, h):
        x = h * 2; q = self.q(x).t()
        return q, self.k(x).t(), self.v(x).t()
"""
    # The input exists only after the line's first statement: a new line before it could not read it.
    assert not rewrite_source(source, ["ADP009"]).findings


def test_projection_in_a_helper_method_is_hoisted_there() -> None:
    source = HEADER + """    def _project(self, x):
        q = self.q(x).t()
        k = self.k(x).t()
        return q, k, self.v(x).t()

    def forward(self, x):
        return self._project(x)
"""
    code = _rewrite(source)
    assert """    def _project(self, x):
        q_out, k_out, v_out = adopter_kernels.packed_qkv_linear(x, self.q, self.k, self.v)
        q = q_out.t()
""" in code


# Each refusal of fixtures/ADP009_fuse_qkv/neg_moved_projections_unsafe.py next to a twin that differs only in what
# the check looks at, and is packed: the negative cases fail for their reason, not for another one.
REFUSED_AND_TWIN = {
    "input mutated in between": ("h.mul_(2)", "n = h.size(0)"),
    "call before the projection reads the input": (
        "k = torch.cat([torch.relu_(h), self.k(h).t()])",
        "k = torch.cat([torch.relu(m), self.k(h).t()])",
    ),
    "layer reached in between": ("self.k.weight.requires_grad_(False)", "self.q(m)"),
    "early return in between": ("if m is None:\n            return q", "if m is None:\n            q = q * 2"),
    "projection at the end of a chained comparison": ("k = m < q < self.k(h).t()", "k = self.k(h).t() < m < q"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_AND_TWIN))
def test_refusal_and_its_packed_twin(case: str) -> None:
    def source(middle: str) -> str:
        body = "k = self.k(h).t()" if middle.startswith("k =") else middle + "\n        k = self.k(h).t()"
        if middle.startswith("k ="):
            body = middle
        return HEADER + f"""    def forward(self, h, m=None):
        q = self.q(h).t()
        {body}
        v = self.v(h).t()
        return q, k, v
"""

    refused, twin = REFUSED_AND_TWIN[case]
    assert not rewrite_source(source(refused), ["ADP009"]).findings
    assert len(rewrite_source(source(twin), ["ADP009"]).findings) == 1


# ------------------------------------------------------------------------------------------ real models

NEWEST_DIR = ROOT / ".cache" / "transformers-4.57.6"


def _run(pythonpath: str, rules: str, models: list[str]) -> dict[str, dict[str, int]]:
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_CACHE"}
    env["PYTHONPATH"] = pythonpath
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "qkv_real.py"), rules, *models],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {r["model"]: r["findings"] for r in results}


@pytest.mark.skipif(transformers.__version__ != "4.34.1", reason="written against transformers 4.34.1")
def test_real_models_transformers_4_34_1_with_every_rule() -> None:
    """ViT's nested projections are packed. So are BERT's, projected in the arms of an if/elif chain with the query
    before it (plan "sink" copies the query's statement into the arms), beside ADP001, which replaces the
    BertSelfAttention instantiation: its subclass's own forward calls the Linears itself, and its fallback calls
    the (equivalent) rewritten forward."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from qkv_real import check_model, rule_codes
    finally:
        sys.path.remove(str(ROOT / "tests"))
    vit = check_model("vit", rule_codes("all"))
    assert vit["ADP009:ViTSelfAttention"] == 1
    bert = check_model("bert", rule_codes("all"))
    assert bert["ADP001:BertAttention"] == 1 and bert["ADP009:BertSelfAttention"] == 1
    # CLIP: `self._shape(self.k_proj(h), -1, bsz)`; Swin: `self.transpose_for_scores(self.key(h))`; PEGASUS-X: two
    # triples (local tokens, global tokens) in one function, the second packed in a second round, and BART's
    # attention, whose query is projected before an if/elif chain (plan "sink").
    assert check_model("clip", ["ADP009"]) == {"ADP009:CLIPAttention": 1}
    assert check_model("swin", ["ADP009"]) == {"ADP009:SwinSelfAttention": 1}
    assert check_model("pegasus_x", ["ADP009"]) == {
        "ADP009:PegasusXAttention": 1, "ADP009:PegasusXGlobalLocalAttention": 1,
    }
    # Pix2Struct's scores, `scores += position_bias`, are no projection: the packed outputs are not views for
    # autograd anyway (`unsafe_split`), so in-place changes are as free as on three Linears' outputs.
    assert check_model("pix2struct", ["ADP009"]) == {"ADP009:Pix2StructVisionAttention": 1}


@pytest.mark.skipif(not (NEWEST_DIR / "transformers").is_dir(), reason=f"{NEWEST_DIR} is missing (make newest-transformers)")
def test_real_models_transformers_4_57_6() -> None:
    found = _run(os.pathsep.join([str(NEWEST_DIR), str(ROOT)]), "ADP009", ["llama", "mistral", "qwen2", "vit"])
    assert found == {
        "llama": {"ADP009:LlamaAttention": 1},
        "mistral": {"ADP009:MistralAttention": 1},
        "qwen2": {"ADP009:Qwen2Attention": 1},
        "vit": {"ADP009:ViTSelfAttention": 1},
    }
    # In 4.57 LayoutLM's self-attention projects all three before any branch: ADP009 packs them. ADP001 refuses the
    # class: its forward takes parameters the drop-in does not (the attention_class_fits_drop_in guard).
    found = _run(os.pathsep.join([str(NEWEST_DIR), str(ROOT)]), "ADP001,ADP009", ["layoutlm"])
    assert found == {"layoutlm": {"ADP009:LayoutLMSelfAttention": 1}}


def test_real_models_transformers_5() -> None:
    from model_zoo import transformers5_pythonpath

    path = transformers5_pythonpath()
    assert _run(path, "ADP009", ["llama", "vit", "olmo"]) == {
        "llama": {"ADP009:LlamaAttention": 1},
        "vit": {"ADP009:ViTAttention": 1},
        "olmo": {"ADP009:OlmoAttention": 1},  # its projections clamped in place
    }
    # BertSelfAttention in 5.x projects all three before any branch; ADP001 does not claim its instantiation there.
    bert = _run(path, "all", ["bert"])["bert"]
    assert bert["ADP009:BertSelfAttention"] == 1 and not any(k.startswith("ADP001") for k in bert)


ARMS = HEADER + """    def forward(self, x, m=None):
        if m is None:
            {first}
        else:
            q = self.q(x).t()
            k = self.k(x).t()
            v = self.v(x).t()
        {after}
        return q, k, v
"""


@pytest.mark.parametrize(
    ("first", "after", "name"),
    [
        # bound first in the other arm, used nowhere else: the arms exclude each other
        ("q_out = m\n            q, k, v = q_out, q_out, q_out", "", "q_out"),
        # read after the chain: it may hold the other arm's value there
        ("q_out = m\n            q, k, v = q_out, q_out, q_out", "x = q_out", "q_out_1"),
        # read before it is bound in the other arm (a value from elsewhere)
        ("q, k, v = q_out, x, x\n            q_out = m", "", "q_out_1"),
    ],
    ids=["bound-in-other-arm", "read-after-chain", "read-before-bound"],
)
def test_fresh_names_reuse_a_name_only_other_arms_bind(first: str, after: str, name: str) -> None:
    code = _rewrite(ARMS.format(first=first, after=after))
    assert f"{name}, k_out, v_out = adopter_kernels.packed_qkv_linear(x, self.q, self.k, self.v)" in code
