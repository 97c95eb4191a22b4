"""File handling shared by the command-line front-ends: discovery, decoding/parsing with located errors, atomic writes.

Nothing here knows about rules; the engine reads and parses a file with :func:`read_source` and :func:`parse_file`
(``engine.analyse_file``), and a front-end writes ``module.bytes`` back with :func:`atomic_write`, which keeps the
original encoding and newline style.
"""

from __future__ import annotations

import ast
import contextlib
import faulthandler
import io
import operator
import os
import re
import tokenize
from dataclasses import dataclass, field
from fnmatch import fnmatch
from itertools import accumulate, compress
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence, Union

import libcst as cst

from . import unvalidated_parse

# Directory names never walked into: VCS metadata, virtual environments, build output, installed packages.
DEFAULT_EXCLUDES: tuple[str, ...] = (
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    "env",
    ".tox",
    ".nox",
    "build",
    "dist",
    "node_modules",
    "__pycache__",
    "site-packages",
    ".eggs",
    ".mypy_cache",
    ".pytest_cache",
)


@dataclass(frozen=True)
class FileError:
    """An input that could not be processed. ``line`` is None when the problem concerns the whole file."""

    path: str
    line: Optional[int]
    message: str

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "line": self.line, "message": self.message}


class SourceError(Exception):
    def __init__(self, error: FileError) -> None:
        super().__init__(error.message)
        self.error = error


def _excluded(rel: str, name: str, patterns: Sequence[str]) -> bool:
    # A pattern matches a path component's name (`tests`, `*_pb2.py`) or the path as walked (`src/legacy/*`).
    rel = os.path.normpath(rel)
    return any(fnmatch(name, p) or fnmatch(rel, p) for p in patterns)


def discover(paths: Iterable[str], excludes: Sequence[str] = ()) -> tuple[list[str], list[FileError]]:
    """Python files under ``paths`` in a stable order, and an error per path that does not exist.

    Directories are walked recursively for ``*.py``, skipping :data:`DEFAULT_EXCLUDES` and ``excludes``; links to
    directories are not followed (no cycles), links to files are, each file being listed once. A file
    named explicitly is taken whatever its suffix (pre-commit passes extensionless scripts with a Python shebang);
    only ``excludes`` apply to it.
    """
    found: list[str] = []
    errors: list[FileError] = []
    seen: set[str] = set()

    def add(path: str) -> None:
        key = os.path.realpath(path)  # a file reached through a symlink too is processed once
        if key not in seen:
            seen.add(key)
            found.append(path)

    for arg in paths:
        if os.path.isdir(arg):
            for root, dirs, files in os.walk(arg):
                dirs[:] = sorted(
                    d for d in dirs if d not in DEFAULT_EXCLUDES and not _excluded(os.path.join(root, d), d, excludes)
                )
                for name in sorted(files):
                    path = os.path.join(root, name)
                    if arg == os.curdir:
                        path = os.path.normpath(path)  # `model.py`, not `./model.py` (as `scan` with no PATH shows)
                    if name.endswith(".py") and not _excluded(path, name, excludes):
                        add(path)
        elif os.path.exists(arg):
            if not _excluded(arg, os.path.basename(arg), excludes):
                add(arg)
        else:
            errors.append(FileError(arg, None, "no such file or directory"))
    return found, errors


# LibCST's native parser overflows its stack and kills the whole process on deep nesting: ~3000 nested brackets,
# ~10000 chained `and`s or unary minuses (and takes seconds on a few thousand chained `+`). CPython refuses most
# of these shapes with an error (more than 200 nested brackets; a RecursionError from ~3000 levels), not all: it
# compiles 10000 chained `and`s. So a cheap screen of the bytes looks for deep brackets and long logical lines
# (every level of nesting costs at least one byte); a file it flags goes to CPython's parser first, then to LibCST
# in a forked child, and only then to LibCST in this process.
_SUSPICIOUS_DEPTH = 100
_SUSPICIOUS_LENGTH = 2000  # non-blank bytes in one logical line
# Strings and comments become blanks first (offsets and line count unchanged): their brackets do not nest.
_STRING_OR_COMMENT = re.compile(  # each alternative "unrolled" (runs of plain bytes first): 2x faster
    rb'"""[^"\\]*(?:(?:\\[\s\S]|"(?!""))[^"\\]*)*"""'
    rb"|'''[^'\\]*(?:(?:\\[\s\S]|'(?!''))[^'\\]*)*'''"
    rb'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
    rb"|'[^'\\\n]*(?:\\.[^'\\\n]*)*'"
    rb"|#[^\n]*"
)
_BRACKET = re.compile(rb"[()\[\]{}]")
_NOT_BRACKETS = re.compile(rb"[^()\[\]{}]+")
_STEPS = bytes.maketrans(b"([{)]}", b"\x01\x01\x01\x02\x02\x02")
_STEP = (0, 1, -1).__getitem__
_CONTINUATION = re.compile(rb"\\\r?\n")


def _blank(match: re.Match[bytes]) -> bytes:
    text = match.group()
    newlines = text.count(b"\n")
    return b"\n" * newlines + b" " * (len(text) - newlines) if newlines else b" " * len(text)


def _long(data: bytes, start: int, end: int) -> bool:
    """Whether `data[start:end]` holds more than the suspicious length once blanks are left out."""
    if end - start <= _SUSPICIOUS_LENGTH:
        return False
    return end - start - data.count(b" ", start, end) - data.count(b"\n", start, end) > _SUSPICIOUS_LENGTH


def _suspicious_offset(data: bytes) -> Optional[int]:
    """Where a file nests brackets deeply or has a very long logical line, if it does. Works on the brackets'
    running depth with C-speed iteration (a Python loop per bracket would cost a tenth of the parse). A stray
    bracket the blanking missed can only make groups look deeper or longer (costing an extra parse)."""
    clean = _STRING_OR_COMMENT.sub(_blank, data)
    steps = _NOT_BRACKETS.sub(b"", clean).translate(_STEPS)
    if steps:
        depth = list(accumulate(map(_STEP, steps)))
        # Depth above the lowest point so far: a stray closer starts a new baseline instead of hiding what follows.
        rise = list(map(operator.sub, depth, accumulate(depth, min)))
        deepest = max(rise)
        positions = [m.start() for m in _BRACKET.finditer(clean)]
        if deepest > _SUSPICIOUS_DEPTH:
            return positions[rise.index(deepest)]
        # Brackets back at the baseline; between two of them lies at most one outermost group (plus plain code).
        level = [0, *compress(positions, map(operator.not_, rise)), len(clean)]
        wide = compress(range(len(level) - 1), map(_SUSPICIOUS_LENGTH.__lt__, map(operator.sub, level[1:], level)))
        for i in wide:
            if _long(clean, level[i], level[i + 1]):
                return level[i]
    joined = _CONTINUATION.sub(b"", clean) if b"\\" in clean else clean
    lines = joined.split(b"\n")
    if max(map(len, lines)) > _SUSPICIOUS_LENGTH:
        offset = 0
        for line in lines:
            if _long(line, 0, len(line)):
                return offset  # offsets in `joined` are at most those in `data`: the same line or one before
            offset += len(line) + 1
    return None


def _refused_by_cpython(data: bytes, offset: int) -> Optional[tuple[int, str]]:
    try:
        ast.parse(data)
    except SyntaxError as exc:
        return exc.lineno or _line_of_offset(data, offset), f"syntax error: {exc.msg}"
    except (RecursionError, MemoryError):
        return _line_of_offset(data, offset), "nested too deeply for Python's parser (it cannot be compiled)"
    return None


def _libcst_survives(data: bytes) -> bool:
    """Whether LibCST's parser returns (with a module or an error) on `data`, tried in a forked child so that a
    crash only ends the child. Without ``fork`` (Windows), assumed."""
    if not hasattr(os, "fork"):
        return True
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; coverage tools do not follow it
        faulthandler.disable()  # a crash here is expected and reported by the parent, not dumped on stderr
        try:
            cst.parse_module(data)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status)


def ensure_parser_survives(path: str, data: bytes) -> None:
    """Raise :class:`SourceError` for a file that would crash LibCST's parser (see the screen above); for any
    other file this costs a scan of its brackets and line lengths."""
    suspicious = _suspicious_offset(data)
    if suspicious is None:
        return
    refused = _refused_by_cpython(data, suspicious)
    if refused is not None:
        raise SourceError(FileError(path, *refused))
    if not _libcst_survives(data):
        line = _line_of_offset(data, suspicious)
        raise SourceError(FileError(path, line, "nested too deeply for LibCST's parser (it crashed on a copy)"))


def _line_of_offset(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def parse(source: Union[str, bytes], path: str) -> cst.Module:
    """The one way the engine's front-ends parse: the crash screen of :func:`ensure_parser_survives` (raises
    :class:`SourceError`), then LibCST (raises ``libcst.ParserSyntaxError``). Bytes are decoded as a file's content
    (PEP 263 cookie or BOM, kept for ``module.bytes``), str taken as text. The parser's nodes are not validated
    again (:mod:`.unvalidated_parse`)."""
    ensure_parser_survives(path, source.encode("utf-8") if isinstance(source, str) else source)
    return unvalidated_parse.parse_module(source)


# The modules being analysed (engine.analyse, each round of engine.rewrite_module), innermost last.
_ANALYSED: list["_Analysed"] = []


@dataclass
class _Analysed:
    module: cst.Module
    source: Optional[bytes]  # the bytes it was parsed from, when known
    memo: dict[str, object] = field(default_factory=dict)


@contextlib.contextmanager
def analysing(module: cst.Module, source: Optional[bytes] = None) -> Iterator[None]:
    """While in the block, :func:`source_of` gives `module`'s `source` (the bytes it was parsed from, if known) and
    :func:`memo_of` one dict for what the guards derive from the whole module. Both end with the block, so nothing
    keeps the module alive past its analysis: a tree that outlives the collector's pause (:mod:`.gc_pause`) is
    traversed by every later collection."""
    _ANALYSED.append(_Analysed(module, source))
    try:
        yield
    finally:
        _ANALYSED.pop()


def _scope(module: cst.Module) -> Optional[_Analysed]:
    for scope in reversed(_ANALYSED):
        if scope.module is module:
            return scope
    return None


def source_of(module: cst.Module) -> Union[str, bytes]:
    """What to give ``ast.parse`` for a whole module: the bytes it was parsed from while it is analysed, else its
    code, generated from the tree (the same text: LibCST round-trips exactly; generating it costs about a parse)."""
    source = source_bytes(module)
    return source if source is not None else module.code


def source_bytes(module: cst.Module) -> Optional[bytes]:
    """The bytes `module` was parsed from while it is analysed and they are known, else None (nothing rendered)."""
    scope = _scope(module)
    return scope.source if scope is not None else None


def memo_of(module: cst.Module) -> dict[str, object]:
    """The memo of `module` while it is analysed (one dict for the whole analysis), else a new empty dict."""
    scope = _scope(module)
    return scope.memo if scope is not None else {}


def read_source(path: str) -> bytes:
    """A file's bytes; raises :class:`SourceError` naming the file when it cannot be read."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SourceError(FileError(path, None, f"cannot read file: {exc.strerror or exc}")) from None


def parse_file(path: str, data: bytes) -> cst.Module:
    """Parse a file's bytes (see :func:`parse`); raises :class:`SourceError` with the line of the problem where there
    is one, also for an unknown encoding, undecodable bytes and syntax errors.

    The module keeps the file's encoding (PEP 263 cookie or BOM) and newline style, so ``module.bytes`` round-trips.
    """
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except SyntaxError as exc:  # unknown or malformed coding cookie
        raise SourceError(FileError(path, exc.lineno or 1, f"cannot decode file: {exc.msg}")) from None
    except UnicodeDecodeError as exc:
        line = _line_of_offset(data, exc.start)
        raise SourceError(FileError(path, line, f"cannot decode file as {encoding}: {exc.reason}")) from None
    try:
        return parse(data, path)
    except cst.ParserSyntaxError as exc:
        raise SourceError(FileError(path, *_syntax_error(text, exc))) from None


def _syntax_error(text: str, exc: cst.ParserSyntaxError) -> tuple[int, str]:
    # LibCST's native parser sometimes reports the line after the error (an unclosed bracket is noticed at the
    # next token); CPython's parser locates it exactly, so prefer its line and message when it also rejects the code.
    try:
        ast.parse(text)
    except SyntaxError as py_exc:
        if py_exc.lineno is not None:
            return py_exc.lineno, f"syntax error: {py_exc.msg}"
    return exc.editor_line, f"syntax error: {exc.message}"


def atomic_write(path: str, data: bytes) -> None:
    """Replace the file's content so that readers see either the old or the new file, never a partial one.

    Writes a temporary file in the same directory (same file system, so ``os.replace`` is atomic), fsyncs it,
    copies the original permission bits and renames it over the target. A symlink is followed: its target is
    rewritten and the link stays a link.
    """
    target = os.path.realpath(path)
    directory, name = os.path.split(target)
    mode = os.stat(target).st_mode & 0o7777
    import tempfile  # imported when writing: `scan` never does

    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".adopter-tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_directory(directory)


def _fsync_directory(directory: str) -> None:
    # Makes the rename durable; not every platform can open a directory for fsync.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
