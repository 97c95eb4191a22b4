"""ADP010 on attention whose softmax is a layer bound in __init__ (`self.attend = nn.Softmax(dim = -1)`: the default
Attention of vit-pytorch, many transformers and timm models). The fused call receives the layer
(`softmax=self.attend`), as it receives the dropout layer, and the layer stays in __init__: hooks on it (vit-pytorch's
Recorder) still fire, other uses keep working, and whatever the attribute holds at run time is what runs."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Iterator

import pytest

from adopter_codemods.api import rewrite_source
from conftest import FIXTURES

torch = pytest.importorskip("torch")

from torch import fx, nn  # noqa: E402

import adopter_kernels  # noqa: E402
from adopter_kernels.equivalence import (  # noqa: E402
    compare_models,
    default_dtype,
    load_source_as_module,
    seeded,
)

ADP010 = FIXTURES / "ADP010_fuse_attention_core"
VIT = ADP010 / "vit_pytorch_softmax_module.py"
TOL = {"rtol": 1e-9, "atol": 1e-9}


@pytest.fixture(params=["auto", "attention_core=sdpa"], ids=["auto", "sdpa"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    with adopter_kernels.use_backend(request.param):
        yield request.param


def _pair(source: str, name: str, **kwargs: Any) -> tuple[nn.Module, nn.Module, torch.Tensor]:
    result = rewrite_source(source, ["ADP010"])
    assert [f.code for f in result.findings] == ["ADP010"]
    original = load_source_as_module(source, f"adp010_sm_{name}_o")
    rewritten = load_source_as_module(result.code, f"adp010_sm_{name}_r")
    with default_dtype(torch.float64), seeded(0):
        model_o = original.Attention(**kwargs)
        model_r = rewritten.Attention(**kwargs)
        x = torch.randn(2, 5, 16)
    model_r.load_state_dict(model_o.state_dict(), strict=True)
    return model_o, model_r, x


def test_the_layer_stays_and_is_passed_to_the_kernel() -> None:
    source = VIT.read_text(encoding="utf-8")
    for rules in (["ADP010"], None):  # alone and with every rule (AdoptAll)
        code = rewrite_source(source, rules).code
        assert "self.attend = nn.Softmax(dim = -1)" in code
        assert "softmax=self.attend, dropout=self.dropout)" in code
        assert "self.attend(" not in code


def test_recorder_hook_on_the_softmax_layer_still_records(backend: str) -> None:
    """vit-pytorch's Recorder: `module.attend.register_forward_hook(...)` collects every attention map."""
    model_o, model_r, x = _pair(VIT.read_text(encoding="utf-8"), "recorder")
    maps: dict[str, list[torch.Tensor]] = {"o": [], "r": []}
    for key, model in (("o", model_o), ("r", model_r)):
        model.eval()
        model.attend.register_forward_hook(lambda _m, _i, out, key=key: maps[key].append(out.detach().clone()))
        with torch.no_grad():
            model(x)
    assert len(maps["r"]) == len(maps["o"]) == 1
    torch.testing.assert_close(maps["r"][0], maps["o"][0], **TOL)
    report = compare_models(model_o, model_r, (x,), **TOL)  # hooks on both: the reference path runs
    report.raise_if_failed()


def test_equivalent_with_the_sdpa_backend_in_train_and_eval(backend: str) -> None:
    model_o, model_r, x = _pair(VIT.read_text(encoding="utf-8"), "modes", dropout=0.0)
    compare_models(model_o, model_r, (x,), **TOL).raise_if_failed()


IF_ELSE = textwrap.dedent('''\
    import torch
    from torch import nn


    class Attention(nn.Module):
        def __init__(self, dim=16, heads=2, sparse=False):
            super().__init__()
            self.heads = heads
            self.scale = (dim // heads) ** -0.5
            self.qkv = nn.Linear(dim, dim * 3)
            if sparse:
                self.attend = nn.Softmax(dim=1)
            else:
                self.attend = nn.Softmax(dim=-1)

        def forward(self, x):
            b, n, c = x.shape
            q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
            dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale
            attn = self.attend(dots)
            return torch.matmul(attn, v)
''')


@pytest.mark.parametrize("sparse", [False, True])
def test_what_the_attribute_holds_at_run_time_is_what_runs(sparse: bool, backend: str) -> None:
    """The layer bound on one arm fits the rule, the other does not; the call runs the module it is given, so both
    constructions stay equivalent (and so does a layer replaced from outside the class)."""
    model_o, model_r, x = _pair(IF_ELSE, f"ifelse_{sparse}", sparse=sparse)
    compare_models(model_o, model_r, (x,), **TOL).raise_if_failed()
    model_o.attend = nn.Identity()
    model_r.attend = nn.Identity()
    compare_models(model_o, model_r, (x,), **TOL).raise_if_failed()


TRACEABLE = textwrap.dedent('''\
    import torch
    from torch import nn


    class Attention(nn.Module):
        def __init__(self, dim=16, heads=2, dropout=0.1):
            super().__init__()
            self.heads = heads
            self.scale = (dim // heads) ** -0.5
            self.qkv = nn.Linear(dim, dim * 3)
            self.attend = nn.Softmax(dim=-1)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            qkv = self.qkv(x).reshape(x.shape[0], x.shape[1], 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            dots = q @ k.transpose(-2, -1) * self.scale
            attn = self.attend(dots)
            attn = self.dropout(attn)
            out = attn @ v
            return out.transpose(1, 2).flatten(2)
''')


def test_fx_trace_keeps_the_layer_as_a_module(backend: str) -> None:
    """A leaf call of the kernel receiving the layer as a get_attr node, traced in train mode, run in both."""
    model_o, model_r, x = _pair(TRACEABLE, "fx")
    traced = fx.symbolic_trace(model_r.train())
    assert any(n.op == "call_function" and n.target is adopter_kernels.attention_core for n in traced.graph.nodes)
    assert any(n.op == "get_attr" and n.target == "attend" for n in traced.graph.nodes)
    compare_models(model_o, traced, (x,), **TOL).raise_if_failed()


def test_dynamo_compiles_the_rewrite_without_graph_breaks(backend: str) -> None:
    model_o, model_r, x = _pair(VIT.read_text(encoding="utf-8"), "dynamo", dropout=0.0)
    torch._dynamo.reset()
    try:
        model_r.eval()
        compiled = torch.compile(model_r, backend="eager", fullgraph=True)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model_o.eval()(x), **TOL)
    finally:
        torch._dynamo.reset()


def test_fixture_paths_exist() -> None:
    assert VIT.exists() and Path(str(VIT).replace(".py", ".expected.py")).exists()


class _DoubledSequential(nn.Sequential):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().forward(input) * 2


def _hooked(module: nn.Module, seen: list[int]) -> nn.Module:
    module.register_forward_hook(lambda *_: seen.append(1))
    return module


# (softmax argument, dropout argument, train mode, whether SDPA runs): the kernel takes SDPA for a plain
# nn.Sequential of a plain softmax over the last dim and at most a plain dropout, and calls anything else.
SEQUENTIALS = {
    "softmax_dropout": (lambda: nn.Sequential(nn.Softmax(dim=-1), nn.Dropout(0.1)), None, False, True),
    "softmax_alone": (lambda: nn.Sequential(nn.Softmax(dim=-1)), None, False, True),
    "softmax_alone_dropout_argument": (lambda: nn.Sequential(nn.Softmax(dim=-1)), nn.Dropout(0.1), False, True),
    "two_dropouts": (lambda: nn.Sequential(nn.Softmax(dim=-1), nn.Dropout(0.1)), nn.Dropout(0.1), False, False),
    "softmax_over_heads": (lambda: nn.Sequential(nn.Softmax(dim=1), nn.Dropout(0.1)), None, False, False),
    "three_layers": (lambda: nn.Sequential(nn.Softmax(dim=-1), nn.Dropout(0.1), nn.Identity()), None, False, False),
    "identity_not_dropout": (lambda: nn.Sequential(nn.Softmax(dim=-1), nn.Identity()), None, False, False),
    "overriding_subclass": (lambda: _DoubledSequential(nn.Softmax(dim=-1), nn.Dropout(0.1)), None, False, False),
    "training_dropout_on_cpu": (lambda: nn.Sequential(nn.Softmax(dim=-1), nn.Dropout(0.1)), None, True, False),
}


@pytest.mark.parametrize("case", sorted(SEQUENTIALS))
def test_a_softmax_dropout_sequential_runs_sdpa_only_where_plain(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    make, dropout, training, takes_sdpa = SEQUENTIALS[case]
    calls: list[int] = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append(1) or sdpa(*a, **k))
    with default_dtype(torch.float64), seeded(0):
        softmax = make().train(training)
        q, k, v = (torch.randn(2, 2, 5, 8) for _ in range(3))
        mask = torch.randn(2, 5, 5)
    if dropout is not None:
        dropout.train(training)
    with adopter_kernels.use_backend("attention_core=sdpa"), seeded(1):
        fused = adopter_kernels.attention_core(q, k, v, mask=mask, softmax=softmax, dropout=dropout,
                                               score_equation="b h i d, b h j d -> b h i j",
                                               output_equation="b h i j, b h j d -> b h i d")
    with seeded(1):
        probs = softmax(q @ k.transpose(-1, -2) + mask)
        expected = (dropout(probs) if dropout is not None else probs) @ v
    assert bool(calls) == takes_sdpa
    torch.testing.assert_close(fused, expected, **TOL)


def test_a_hook_on_the_sequential_or_its_softmax_keeps_the_original(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append(1) or sdpa(*a, **k))
    with default_dtype(torch.float64), seeded(0):
        q, k, v = (torch.randn(2, 2, 5, 8) for _ in range(3))
    for hook_on_container in (True, False):
        seen: list[int] = []
        softmax = nn.Sequential(nn.Softmax(dim=-1), nn.Dropout(0.1)).eval()
        _hooked(softmax if hook_on_container else softmax[0], seen)
        with adopter_kernels.use_backend("attention_core=sdpa"):
            fused = adopter_kernels.attention_core(q, k.transpose(-1, -2), v, softmax=softmax)
        assert seen == [1] and not calls
        torch.testing.assert_close(fused, softmax[0](q @ k.transpose(-1, -2)) @ v, **TOL)
