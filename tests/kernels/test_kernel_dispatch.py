"""Backend selection and the import-time contract of adopter_kernels."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import adopter_kernels as ak
from adopter_kernels import _dispatch

ROOT = Path(__file__).resolve().parents[2]


def test_import_pulls_in_no_triton_transformers_or_libcst() -> None:
    code = (
        "import sys, adopter_kernels\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('triton', 'transformers', 'libcst')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def _softmax_backend(x: torch.Tensor) -> str:
    return _dispatch.select("softmax", x)


def test_default_backend_is_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ak.BACKEND_ENV, raising=False)
    assert ak.current_backend() == "auto"
    # auto never routes CPU tensors to Triton.
    assert not _softmax_backend(torch.zeros(2)) == "triton"


@pytest.mark.parametrize("value", ["reference", "triton", "auto", " Reference "])
def test_env_var_is_read_per_call(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(ak.BACKEND_ENV, value)
    assert ak.current_backend() == value.strip().lower()


def test_env_var_read_follows_every_way_of_changing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cheap read (the encoded key in os.environ's own store) sees assignment, deletion and
    monkeypatch.setenv, as os.environ.get does."""
    import os

    monkeypatch.delenv(ak.BACKEND_ENV, raising=False)
    assert _dispatch._spec() == ""
    os.environ[ak.BACKEND_ENV] = "reference,softmax=triton"
    try:
        assert _dispatch._spec() == os.environ.get(ak.BACKEND_ENV) == "reference,softmax=triton"
    finally:
        del os.environ[ak.BACKEND_ENV]
    assert _dispatch._spec() == ""
    monkeypatch.setenv(ak.BACKEND_ENV, "auto,packed_qkv_linear=packed")
    assert _dispatch._spec() == "auto,packed_qkv_linear=packed"


def test_env_var_reader_without_cpythons_store_uses_get(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where os.environ lacks CPython's layout, the reader is the plain lookup."""
    monkeypatch.setattr(_dispatch.os, "environ", {ak.BACKEND_ENV: "reference"})
    assert _dispatch._environment_reader()() == "reference"


def test_bad_env_var_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ak.BACKEND_ENV, "cuda")
    with pytest.raises(ValueError, match="ADOPTER_KERNELS_BACKEND"):
        ak.current_backend()


def test_use_backend_overrides_env_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ak.BACKEND_ENV, "triton")
    with ak.use_backend("reference"):
        assert ak.current_backend() == "reference"
        assert not _softmax_backend(torch.zeros(2)) == "triton"
    assert ak.current_backend() == "triton"
    with pytest.raises(ValueError):
        with ak.use_backend("fast"):
            pass


def test_forced_triton_without_triton_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_dispatch, "triton_available", lambda: False)
    with ak.use_backend("triton"):
        with pytest.raises(RuntimeError, match="forces softmax=triton, but triton is not installed"):
            _softmax_backend(torch.zeros(2)) == "triton"
    with ak.use_backend("auto"):
        assert not _softmax_backend(torch.zeros(2)) == "triton"


def test_forced_triton_routes_cpu_tensors_but_not_under_autocast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_dispatch, "triton_available", lambda: True)
    with ak.use_backend("triton"):
        assert _softmax_backend(torch.zeros(2)) == "triton"
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not _softmax_backend(torch.zeros(2)) == "triton"


def test_is_plain_rejects_subclasses_and_hooks() -> None:
    class MyLinear(torch.nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) * 2

    lin = torch.nn.Linear(2, 2)
    assert _dispatch.is_plain(lin, torch.nn.Linear)
    assert not _dispatch.is_plain(MyLinear(2, 2), torch.nn.Linear)
    handle = lin.register_forward_hook(lambda *args: None)
    assert not _dispatch.is_plain(lin, torch.nn.Linear)
    handle.remove()
    assert _dispatch.is_plain(lin, torch.nn.Linear)
