"""Guarded rewrites (docs/DESIGN.md §4): where a layer's type is only possible, the rewrite calls a kernel that
checks the modules at run time, so the rewritten code must equal the original for ANY modules, on the fused path
too. Here the fold is forced (on CPU `auto` runs the original), with modules the rewrite did not expect."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from adopter_codemods.api import rewrite_source, scan_source
from conftest import FIXTURES, expected_path

torch = pytest.importorskip("torch")
nn = torch.nn
ak = pytest.importorskip("adopter_kernels")

FOLDED = "auto,conv_bn2d=folded,linear_bn1d=folded"
GUARDED = [
    FIXTURES / "ADP007_fuse_conv_bn" / name
    for name in (
        "factory_and_norm_layer.py",
        "guarded_group_norm.py",
        "partial_and_or.py",
        "sequential_from_list.py",
        "sequential_subclass.py",
    )
] + [FIXTURES / "ADP008_fuse_linear_bn" / "norm_layer_default.py"]


@pytest.mark.parametrize("case", GUARDED, ids=[f"{c.parent.name}/{c.name}" for c in GUARDED])
def test_guarded_fixture_reports_and_stays_equivalent_when_folding(case: Path) -> None:
    from adopter_kernels.equivalence import assert_equivalent, load_source_as_module

    source = case.read_text(encoding="utf-8")
    findings = scan_source(source, [case.parent.name.split("_")[0]])
    assert "guarded" in {f.certainty for f in findings}
    stem = f"guarded_{case.parent.name}_{case.stem}"
    original = load_source_as_module(source, stem + "_original", path=str(case))
    rewritten = load_source_as_module(expected_path(case).read_text(encoding="utf-8"), stem + "_rewritten")
    with ak.use_backend(FOLDED):
        assert_equivalent(original, rewritten)


class ShiftedConv2d(nn.Conv2d):
    """Keeps Conv2d.forward; its _conv_forward adds a shift that folding BN into the weights would not fold."""

    def _conv_forward(self, input, weight, bias):  # type: ignore[no-untyped-def]
        return super()._conv_forward(input, weight, bias) + 0.5


class Renamed(nn.BatchNorm2d):
    """Same forward, same helpers, same computation: folded like nn.BatchNorm2d."""


def _pairs() -> list[tuple[str, nn.Module, nn.Module]]:
    return [
        ("group norm", nn.Conv2d(4, 4, 3, padding=1), nn.GroupNorm(2, 4)),
        ("conv subclass", ShiftedConv2d(4, 4, 1), nn.BatchNorm2d(4)),
        ("bn subclass", nn.Conv2d(4, 4, 1), Renamed(4)),
        ("identity", nn.Conv2d(4, 4, 1), nn.Identity()),
        ("other conv", nn.Sequential(nn.Conv2d(4, 4, 1)), nn.BatchNorm2d(4)),
        ("plain", nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4)),
    ]


@pytest.mark.parametrize("case", range(len(_pairs())), ids=[p[0] for p in _pairs()])
def test_conv_bn2d_equals_the_original_for_any_modules(case: int, float64: None) -> None:
    torch.manual_seed(0)
    _, conv, norm = _pairs()[case]
    x = torch.randn(2, 4, 5, 5)
    conv(x)
    norm.train()
    norm(conv(x))  # running statistics that are not the defaults
    norm.eval()
    expected = norm(conv(x))
    with torch.no_grad(), ak.use_backend(FOLDED):
        got = ak.conv_bn2d(x, conv, norm)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


def test_a_subclass_changing_a_helper_of_forward_stays_unfolded() -> None:
    from adopter_kernels._dispatch import is_plain

    assert is_plain(ShiftedConv2d(2, 2, 1), nn.Conv2d)  # forward is Conv2d's ...
    assert not is_plain(ShiftedConv2d(2, 2, 1), nn.Conv2d, "_conv_forward")  # ... what it calls is not
    assert is_plain(nn.Conv2d(2, 2, 1), nn.Conv2d, "_conv_forward")
    assert is_plain(Renamed(2), nn.BatchNorm2d, "_check_input_dim")


def test_hooks_keep_the_original_path(float64: None) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 4, requires_grad=True)
    conv, bn = nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3).eval()
    seen: list[str] = []
    conv.register_forward_hook(lambda m, i, o: o * 2)
    bn.register_full_backward_hook(lambda m, gi, go: seen.append("backward") or None)
    expected = bn(conv(x))
    expected.sum().backward()
    assert seen == ["backward"]
    with ak.use_backend(FOLDED):
        got = ak.conv_bn2d(x, conv, bn)
        got.sum().backward()
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)
    assert seen == ["backward", "backward"]  # the fused path would have skipped both hooks


def test_linear_bn1d_equals_the_original_for_other_norms(float64: None) -> None:
    torch.manual_seed(0)
    x = torch.randn(6, 4)
    linear = nn.Linear(4, 4)
    for norm in (nn.LayerNorm(4), nn.GroupNorm(2, 4), nn.BatchNorm1d(4).eval()):
        with torch.no_grad(), ak.use_backend(FOLDED):
            torch.testing.assert_close(ak.linear_bn1d(x, linear, norm), norm(linear(x)), rtol=1e-9, atol=1e-9)


def test_fused_sequential_runs_other_children_as_nn_sequential(float64: None) -> None:
    torch.manual_seed(0)
    children = [ShiftedConv2d(3, 3, 1), nn.BatchNorm2d(3), nn.Conv2d(3, 3, 1), functools.partial(nn.GroupNorm, 3)(3)]
    plain, fused = nn.Sequential(*children).eval(), ak.FusedSequential(*children).eval()
    x = torch.randn(2, 3, 4, 4)
    with torch.no_grad(), ak.use_backend(FOLDED):
        torch.testing.assert_close(fused(x), plain(x), rtol=1e-9, atol=1e-9)
    assert fused.state_dict().keys() == plain.state_dict().keys()


def test_certainty_in_every_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from adopter_codemods.cli import main

    case = FIXTURES / "ADP007_fuse_conv_bn" / "partial_and_or.py"
    (tmp_path / "model.py").write_text(case.read_text(encoding="utf-8"), encoding="utf-8")
    target = str(tmp_path / "model.py")
    main(["scan", "--no-cache", "--rules", "ADP007", "--format", "json", target])
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert [(f["line"], f["certainty"]) for f in findings] == [(22, "guarded"), (25, "exact"), (37, "guarded")]
    main(["scan", "--no-cache", "--rules", "ADP007", "--format", "text", target])
    lines = capsys.readouterr().out.splitlines()
    assert [line.endswith(" [guarded]") for line in lines] == [True, False, True]
    main(["scan", "--no-cache", "--rules", "ADP007", "--format", "sarif", target])
    results = json.loads(capsys.readouterr().out)["runs"][0]["results"]
    assert [r["properties"]["certainty"] for r in results] == ["guarded", "exact", "guarded"]
    rewritten = rewrite_source(case.read_text(encoding="utf-8"), ["ADP007"])
    assert [f.certainty for f in rewritten.findings] == ["guarded", "exact", "guarded"]
