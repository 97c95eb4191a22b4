"""The fast CST walk visits exactly the syntax nodes LibCST's visitor visits, in the same (source) order."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from adopter_codemods import cstwalk

# Nodes the walk skips on purpose: whitespace, comments, brackets, punctuation, operators (no names inside).
TRIVIA = (
    cst.BaseParenthesizableWhitespace,
    cst.EmptyLine,
    cst.TrailingWhitespace,
    cst.Newline,
    cst.Comment,
    cst.LeftParen,
    cst.RightParen,
    cst.Comma,
    cst.Semicolon,
    cst.AssignEqual,
    cst.Colon,
    cst.Dot,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
    cst.Asynchronous,
    cst.ParamSlash,
    cst.ImportStar,
    cst.BaseBinaryOp,
    cst.BaseBooleanOp,
    cst.BaseCompOp,
    cst.BaseUnaryOp,
    cst.BaseAugOp,
)

EVERY_SYNTAX = '''\
from . import a as b
from .x import (y, z as w)
import os.path as osp, sys
@dec(1)
@other
class C(Base, metaclass=M, **kw):
    x: int = 3
    async def f(self, a, /, b: int = 2, *args, c, d=4, **kwargs) -> "C":
        global G
        async with ctx() as (p, q), other:
            await g(*args, **kwargs)
        async for i in aiter():
            yield i
        return [i for i in range(3) if i if not i], {k: v for k, v in d.items()}, {s for s in t}, (g for g in h)
    def g(self):
        f = lambda x, *y, z=1, **k: x if y else z
        print(f"{self!r:>{width}} {a['b']}", end="")
        del self.a, b[1:2:3]
        assert x, "msg"
        raise E from e
        try:
            pass
        except* ValueError as e:
            pass
        match cmd:
            case [1, 2, *rest] if rest:
                pass
            case {"a": 1, **kw}:
                pass
            case Point(x=0, y=yy) | Other():
                pass
            case str() as s:
                pass
        while (n := n - 1) > 0:
            x @= y; x **= 2
        else:
            pass
        for a, *b in c:
            continue
        return -x, +y, ~z, not w, a < b <= c != d is not e in f not in g, a and b or c, x[1, ...], (yield), (yield from z)
def h[T: int, *Ts, **P](x: T) -> T:
    type Alias[K] = list[K]
    return x
'''


class _Recorder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.seen: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.seen.append(node)
        return True


def _assert_same_walk(module: cst.Module) -> None:
    recorder = _Recorder()
    module.visit(recorder)
    expected = [n for n in recorder.seen if not isinstance(n, TRIVIA)]
    got = [n for n in cstwalk.walk(module) if not isinstance(n, TRIVIA)]
    assert [type(n).__name__ for n in got] == [type(n).__name__ for n in expected]
    assert all(a is b for a, b in zip(got, expected))


def test_every_syntax() -> None:
    _assert_same_walk(cst.parse_module(EVERY_SYNTAX))


def _corpus_sample() -> list[Path]:
    transformers = pytest.importorskip("transformers")
    files = sorted(Path(transformers.__file__).parent.glob("models/*/modeling_*.py"))
    return files[::25]


@pytest.mark.parametrize("path", _corpus_sample(), ids=lambda p: p.parent.name)
def test_transformers_sample(path: Path) -> None:
    _assert_same_walk(cst.parse_module(path.read_bytes()))


def test_descend_prunes_children() -> None:
    module = cst.parse_module("def f():\n    a = b\nc = d\n")
    names = [n.value for n in cstwalk.walk(module, lambda n: not isinstance(n, cst.FunctionDef)) if isinstance(n, cst.Name)]
    assert names == ["c", "d"]
