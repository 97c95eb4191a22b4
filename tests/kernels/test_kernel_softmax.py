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
