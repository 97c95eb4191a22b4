"""ADP004: adopter_kernels.softmax is torch.nn.functional.softmax on the reference path."""

from __future__ import annotations

import inspect
import warnings
from typing import Optional

import pytest
import torch
import torch.nn.functional as F

import adopter_kernels as ak


def test_signature_matches_torch() -> None:
    ours = inspect.signature(ak.softmax).parameters
    theirs = inspect.signature(F.softmax).parameters
    assert [(p.name, p.default) for p in ours.values()] == [(p.name, p.default) for p in theirs.values()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "shape,dim", [((5,), 0), ((4, 7), -1), ((4, 7), 0), ((2, 3, 9), 1), ((2, 3, 4, 5), -1), ((2, 3, 4, 5), 2)]
)
def test_matches_torch_outputs_and_grads(shape: tuple, dim: int, dtype: torch.dtype) -> None:
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    y, y_ref = ak.softmax(x, dim), F.softmax(x_ref, dim)
    assert torch.equal(y, y_ref)
    g = torch.randn_like(y)
    y.backward(g)
    y_ref.backward(g)
    assert torch.equal(x.grad, x_ref.grad)


@pytest.mark.parametrize("out_dtype", [torch.float64, torch.float32])
def test_dtype_argument_casts_first(out_dtype: torch.dtype) -> None:
    x = torch.randn(3, 8, dtype=torch.float32)
    y = ak.softmax(x, -1, dtype=out_dtype)
    assert y.dtype == out_dtype
    assert torch.equal(y, F.softmax(x, -1, dtype=out_dtype))
    assert torch.equal(ak.softmax(x, dim=1, _stacklevel=5, dtype=out_dtype), y)


@pytest.mark.parametrize("shape", [(), (6,), (3, 4), (2, 3, 4), (2, 3, 4, 5)])
def test_implicit_dim_rule_and_warning_point_at_caller(shape: tuple) -> None:
    x = torch.randn(shape)
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        y = ak.softmax(x)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        y_ref = F.softmax(x)
    assert torch.equal(y, y_ref)
    assert len(ours) == 1 and "Implicit dimension choice" in str(ours[0].message)
    assert ours[0].filename == __file__


def test_no_implicit_warning_with_dim() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ak.softmax(torch.randn(2, 3), dim=1)


def test_neg_inf_rows_and_empty_input_behave_as_torch() -> None:
    x = torch.tensor([[0.0, float("-inf")], [float("-inf"), float("-inf")]])
    assert torch.equal(ak.softmax(x, -1).isnan(), F.softmax(x, -1).isnan())
    empty = torch.randn(0, 4)
    assert ak.softmax(empty, -1).shape == (0, 4)


@pytest.mark.parametrize("backend", [None, "reference"])
def test_backend_choice_does_not_change_cpu_result(backend: Optional[str], monkeypatch: pytest.MonkeyPatch) -> None:
    if backend:
        monkeypatch.setenv(ak.BACKEND_ENV, backend)
    x = torch.randn(4, 16)
    assert torch.equal(ak.softmax(x, -1), F.softmax(x, -1))


# --- torch.softmax and Tensor.softmax drop-ins ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("args,kwargs", [((-1,), {}), ((0,), {}), ((), {"dim": 1}), ((-1, torch.float64), {}),
                                         ((1,), {"dtype": torch.float64})])  # fmt: skip
def test_torch_and_method_forms_are_bit_identical(args: tuple, kwargs: dict, dtype: torch.dtype) -> None:
    x = torch.randn(3, 4, 5, dtype=dtype, requires_grad=True)
    g = torch.randn(3, 4, 5, dtype=torch.float64)
    ref = x.softmax(*args, **kwargs)
    (ref_grad,) = torch.autograd.grad(ref, x, g.to(ref.dtype))
    for ours in (ak.tensor_softmax(x, *args, **kwargs), ak.torch_softmax(x, *args, **kwargs)):
        assert torch.equal(ours, ref) and ours.dtype == ref.dtype
        assert torch.equal(torch.autograd.grad(ours, x, g.to(ours.dtype))[0], ref_grad)


def test_signatures_match_the_apis() -> None:
    params = [(p.name, p.default) for p in inspect.signature(ak.torch_softmax).parameters.values()]
    assert params == [("input", inspect.Parameter.empty), ("dim", inspect.Parameter.empty), ("dtype", None)]
    assert [(p.name, p.default) for p in inspect.signature(ak.tensor_softmax).parameters.values()] == params


class _Logits:
    """Not a tensor, with a softmax method of its own: what `obj.softmax(-1)` may be in code the codemod reads."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple, dict]] = []

    def softmax(self, *args: object, **kwargs: object) -> str:
        self.calls.append((args, kwargs))
        return "own softmax"


def test_method_form_on_another_object_makes_the_same_call() -> None:
    logits = _Logits()
    assert ak.tensor_softmax(logits, -1) == "own softmax"  # type: ignore[arg-type]
    assert ak.tensor_softmax(logits, 0, dtype=torch.float64) == "own softmax"  # type: ignore[arg-type]
    assert logits.calls == [((-1,), {}), ((0,), {"dtype": torch.float64})]


def test_method_form_on_a_subclass_calls_its_override() -> None:
    class Tempered(torch.Tensor):
        def softmax(self, dim: int, dtype: Optional[torch.dtype] = None) -> torch.Tensor:  # type: ignore[override]
            return torch.Tensor.softmax(self / 2, dim)

    x = torch.randn(2, 6).as_subclass(Tempered)
    expected = torch.softmax(x.as_subclass(torch.Tensor) / 2, -1)
    assert torch.allclose(ak.tensor_softmax(x, -1).as_subclass(torch.Tensor), expected)


def test_errors_are_the_apis_own() -> None:
    x = torch.randn(2, 3)
    with pytest.raises(TypeError):
        ak.tensor_softmax(x)  # type: ignore[call-arg]
    with pytest.raises(AttributeError, match="softmax"):
        ak.tensor_softmax([1.0, 2.0], -1)  # type: ignore[arg-type]  # a list has no softmax method, as in `[..].softmax`
