"""conv_bn2d(x, conv, bn) == bn(conv(x)) for ANY pair of modules (guarded rewrites, docs/DESIGN.md §4).

A guarded rewrite calls the kernel on layers whose types the engine could not pin down (``norm_layer(planes)``), so
the kernel itself must compute the original expression for whatever modules it gets, and take the folded path only
where that is provably the same function. Each case builds both sides in float64 from one seed, runs eval and
train (a train step and an eval step in sequence, so running statistics are compared too), and compares outputs,
input and parameter gradients and buffers at 1e-9; it also states whether the folded path must be taken, read
through a wrapper around the kernel's folded branch. The folded backend is forced (what CUDA runs; ``auto`` on
CPU always runs ``bn(conv(x))``), and the ``auto`` backend is checked as well.
"""

from __future__ import annotations

import copy
import functools
from typing import Callable, Dict, List, Tuple

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

import adopter_kernels as ak
from adopter_kernels import batch_norm as bn_module
from model_zoo import import_vision

TOL = 1e-9
FOLDED = "conv_bn2d=folded"

_torchvision, _timm = import_vision()
from timm.layers import BatchNormAct2d, Conv2dSame, DropBlock2d, GroupNormAct, StdConv2d  # noqa: E402
from torchvision.ops.misc import FrozenBatchNorm2d  # noqa: E402

Pair = Tuple[nn.Module, nn.Module]


@pytest.fixture(autouse=True)
def _float64() -> None:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


@pytest.fixture
def folded_calls(monkeypatch: pytest.MonkeyPatch) -> List[int]:
    """Counts calls of the kernel's folded branch (a wrapper in the test: production code pays nothing)."""
    calls: List[int] = []
    original = bn_module._conv_bn2d_folded

    def counting(*args: object) -> torch.Tensor:
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(bn_module, "_conv_bn2d_folded", counting)
    return calls


def _randomise(module: nn.Module) -> None:
    """Non-trivial affine parameters and running statistics (a fresh BN folds to almost the identity)."""
    with torch.no_grad():
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            if name.endswith("running_var"):
                tensor.uniform_(0.5, 2.0)
            elif name.endswith(("running_mean", "bias")):
                tensor.normal_()
            elif name.endswith("weight") and tensor.dim() == 1:
                tensor.uniform_(0.5, 1.5)


class BatchNormStrictDims(nn.BatchNorm2d):
    """Overrides only ``_check_input_dim`` (forward inherited): folding would skip its check."""

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.shape[-1] < 4:
            raise ValueError("too narrow")


class BatchNormPlusOne(nn.BatchNorm2d):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return super().forward(input) + 1


class ConvOwnConvForward(nn.Conv2d):
    """Overrides only ``_conv_forward`` (weight standardisation): folding into it would change the function."""

    def _conv_forward(self, input: torch.Tensor, weight: torch.Tensor, bias: object) -> torch.Tensor:
        weight = (weight - weight.mean(dim=(1, 2, 3), keepdim=True)) / 2
        return super()._conv_forward(input, weight, bias)  # type: ignore[arg-type]


class ConvOwnCall(nn.Conv2d):
    def __call__(self, *args: object, **kwargs: object) -> torch.Tensor:
        return super().__call__(*args, **kwargs) * 2


class Scale(nn.Module):
    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight * 1.5


def _conv(**kwargs: object) -> nn.Conv2d:
    return nn.Conv2d(4, 6, 3, **kwargs)  # type: ignore[arg-type]


def _parametrized_conv() -> nn.Conv2d:
    conv = _conv(padding=1)
    parametrize.register_parametrization(conv, "weight", Scale())
    return conv


def _hooked(module: nn.Module, kind: str) -> nn.Module:
    if kind == "forward":
        module.register_forward_hook(lambda m, args, out: out * 0.5)
    elif kind == "pre":
        module.register_forward_pre_hook(lambda m, args: (args[0] - 0.25,))
    else:  # a full backward hook that changes the gradient flowing to the module's input
        module.register_full_backward_hook(lambda m, grad_in, grad_out: tuple(
            None if g is None else g * 3 for g in grad_in))
    return module


def _timm_bn_act(**kwargs: object) -> BatchNormAct2d:
    return BatchNormAct2d(6, **kwargs)  # type: ignore[arg-type]


def _timm_bn_hooked_act() -> BatchNormAct2d:
    bn = _timm_bn_act()
    bn.act = _hooked(nn.Tanh(), "forward")
    return bn


# name -> (builder, must the folded path be taken in eval)
CASES: Dict[str, Tuple[Callable[[], Pair], bool]] = {
    "plain": (lambda: (_conv(), nn.BatchNorm2d(6)), True),
    "no conv bias, BN affine=False": (lambda: (_conv(bias=False), nn.BatchNorm2d(6, affine=False)), True),
    "groups+dilation": (lambda: (_conv(groups=2, dilation=2, padding=2), nn.BatchNorm2d(6)), True),
    "padding_mode reflect": (lambda: (_conv(padding=1, padding_mode="reflect"), nn.BatchNorm2d(6)), True),
    "padding_mode circular": (lambda: (_conv(padding=1, padding_mode="circular"), nn.BatchNorm2d(6)), True),
    "padding_mode replicate": (lambda: (_conv(padding=1, padding_mode="replicate"), nn.BatchNorm2d(6)), True),
    "padding same": (lambda: (nn.Conv2d(4, 6, 4, padding="same"), nn.BatchNorm2d(6)), True),
    # computed on every read (and spectral_norm's read in training updates its buffers): the modules read it
    "parametrized conv weight": (lambda: (_parametrized_conv(), nn.BatchNorm2d(6)), False),
    "BN momentum=None": (lambda: (_conv(), nn.BatchNorm2d(6, momentum=None)), True),
    "BN without running stats": (lambda: (_conv(), nn.BatchNorm2d(6, track_running_stats=False)), False),
    "timm BatchNormAct2d ReLU inplace": (lambda: (_conv(), _timm_bn_act()), True),
    "timm BatchNormAct2d SiLU": (lambda: (_conv(), _timm_bn_act(act_layer=nn.SiLU)), True),
    "timm BatchNormAct2d no act": (lambda: (_conv(), _timm_bn_act(apply_act=False)), True),
    "timm BatchNormAct2d DropBlock+GELU": (
        lambda: (_conv(padding=1), _timm_bn_act(act_layer=nn.GELU, drop_layer=functools.partial(
            DropBlock2d, drop_prob=0.3, block_size=3))), True),
    "timm BatchNormAct2d, act hooked": (
        lambda: (_conv(), _timm_bn_hooked_act()), True),
    "timm BatchNormAct2d hooked": (lambda: (_conv(), _hooked(_timm_bn_act(), "forward")), False),
    "timm BatchNormAct2d without running stats": (
        lambda: (_conv(), _timm_bn_act(track_running_stats=False)), False),
    "timm GroupNormAct": (lambda: (_conv(), GroupNormAct(6, num_groups=3)), False),
    "timm Conv2dSame": (lambda: (Conv2dSame(4, 6, 3, stride=2), nn.BatchNorm2d(6)), False),
    "timm StdConv2d": (lambda: (StdConv2d(4, 6, 3, padding=1), nn.BatchNorm2d(6)), False),
    "torchvision FrozenBatchNorm2d": (lambda: (_conv(), FrozenBatchNorm2d(6)), False),
    "GroupNorm": (lambda: (_conv(), nn.GroupNorm(3, 6)), False),
    "Identity": (lambda: (_conv(), nn.Identity()), False),
    "BN subclass overriding forward": (lambda: (_conv(), BatchNormPlusOne(6)), False),
    "BN subclass overriding _check_input_dim": (lambda: (_conv(), BatchNormStrictDims(6)), False),
    "conv subclass overriding _conv_forward": (lambda: (ConvOwnConvForward(4, 6, 3), nn.BatchNorm2d(6)), False),
    "conv subclass overriding __call__": (lambda: (ConvOwnCall(4, 6, 3), nn.BatchNorm2d(6)), False),
    "conv forward hook": (lambda: (_hooked(_conv(), "forward"), nn.BatchNorm2d(6)), False),
    "conv forward pre-hook": (lambda: (_hooked(_conv(), "pre"), nn.BatchNorm2d(6)), False),
    "BN forward hook": (lambda: (_conv(), _hooked(nn.BatchNorm2d(6), "forward")), False),
    "BN forward pre-hook": (lambda: (_conv(), _hooked(nn.BatchNorm2d(6), "pre")), False),
    "conv backward hook": (lambda: (_hooked(_conv(), "backward"), nn.BatchNorm2d(6)), False),
    "BN backward hook": (lambda: (_conv(), _hooked(nn.BatchNorm2d(6), "backward")), False),
    "BN subclass keeping everything": (lambda: (_conv(), type("Renamed", (nn.BatchNorm2d,), {})(6)), True),
}


def _build(case: str) -> Tuple[Pair, Pair]:
    """The pair twice, identical (the kernel's side and the original expression's side)."""
    torch.manual_seed(0)
    conv, bn = CASES[case][0]()
    _randomise(conv)
    _randomise(bn)
    return (conv, bn), copy.deepcopy((conv, bn))


def _step(conv: nn.Module, bn: nn.Module, fused: bool, x: torch.Tensor, cotangent: torch.Tensor,
          ) -> Dict[str, torch.Tensor]:
    """One forward+backward; what it returns is compared between the two sides."""
    x = x.clone().requires_grad_(True)
    torch.manual_seed(1)  # dropout/DropBlock masks
    out = ak.conv_bn2d(x, conv, bn) if fused else bn(conv(x))
    params = [p for m in (conv, bn) for p in m.parameters()]
    grads = torch.autograd.grad(out, [x, *params], cotangent)
    result = {"output": out.detach(), "input grad": grads[0]}
    result.update({f"grad {i}": g for i, g in enumerate(grads[1:])})
    for module, side in ((conv, "conv"), (bn, "bn")):
        result.update({f"{side} {n}": b.detach().clone() for n, b in module.named_buffers()})
    return result


def _assert_same(actual: Dict[str, torch.Tensor], expected: Dict[str, torch.Tensor], what: str) -> None:
    assert actual.keys() == expected.keys()
    for key, value in expected.items():
        torch.testing.assert_close(actual[key], value, rtol=TOL, atol=TOL, msg=lambda m: f"{what}, {key}: {m}")


@pytest.mark.parametrize("backend", [FOLDED, "auto"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_bn2d_is_bn_of_conv(case: str, backend: str, folded_calls: List[int]) -> None:
    (conv, bn), (conv_ref, bn_ref) = _build(case)
    x = torch.randn(2, 4, 7, 7, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        shape = conv_ref(x).shape
    cotangent = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    with ak.use_backend(backend):
        for mode in ("train", "eval", "train", "eval"):
            for module in (conv, bn, conv_ref, bn_ref):
                module.train(mode == "train")
            taken = len(folded_calls)
            _assert_same(_step(conv, bn, True, x, cotangent), _step(conv_ref, bn_ref, False, x, cotangent),
                         f"{case}, {mode}")
            fused_here = len(folded_calls) > taken
            assert fused_here == (mode == "eval" and backend == FOLDED and CASES[case][1]), (case, mode)


def test_batch_norm_act_with_another_forward_is_not_folded(folded_calls: List[int]) -> None:
    """The folded path stands on the verified text of timm's forward: a class that only looks like it runs its own."""
    namespace: Dict[str, object] = {"nn": nn}
    exec(  # a BatchNormAct2d whose forward applies act before drop: same names, different function
        "class BatchNormAct2d(nn.BatchNorm2d):\n"
        "    def __init__(self, n):\n"
        "        super().__init__(n)\n"
        "        self.act, self.drop = nn.ReLU(), nn.Identity()\n"
        "    def forward(self, x):\n"
        "        return self.drop(self.act(super().forward(x))) - 1\n",
        namespace,
    )
    impostor = namespace["BatchNormAct2d"]
    impostor.__module__ = impostor.forward.__module__ = "timm.layers.norm_act"  # type: ignore[attr-defined]
    conv, bn = _conv(), impostor(6)  # type: ignore[operator]
    bn.eval()
    x = torch.randn(2, 4, 7, 7)
    with ak.use_backend(FOLDED):
        torch.testing.assert_close(ak.conv_bn2d(x, conv, bn), bn(conv(x)), rtol=0, atol=0)
    assert not folded_calls
    assert bn_module._children_after_bn(BatchNormAct2d.forward) == ("drop", "act")


def test_conv_bn2d_passes_non_tensor_input_through() -> None:
    """Any modules: a conv-like module taking a tuple gets the call unchanged."""

    class Pairwise(nn.Module):
        def forward(self, pair: Tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            return pair[0] + pair[1]

    x = (torch.ones(2, 3, 4, 4), torch.ones(2, 3, 4, 4))
    bn = nn.BatchNorm2d(3).eval()
    with ak.use_backend(FOLDED):
        assert torch.equal(ak.conv_bn2d(x, Pairwise(), bn), bn(Pairwise()(x)))  # type: ignore[arg-type]
