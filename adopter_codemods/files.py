"""File handling shared by the command-line front-ends: discovery, decoding/parsing with located errors, atomic writes.

Nothing here knows about rules; a front-end reads a file with :func:`load_module`, hands the module to the engine and
writes ``module.bytes`` back with :func:`atomic_write`, which keeps the original encoding and newline style.
"""

from __future__ import annotations

import ast
import io
import os
import tempfile
import tokenize
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Iterable, Optional, Sequence

import libcst as cst

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

    Directories are walked recursively for ``*.py``, skipping :data:`DEFAULT_EXCLUDES` and ``excludes``. A file
    named explicitly is taken whatever its suffix (pre-commit passes extensionless scripts with a Python shebang);
    only ``excludes`` apply to it.
    """
    found: list[str] = []
    errors: list[FileError] = []
    seen: set[str] = set()

    def add(path: str) -> None:
        key = os.path.normpath(os.path.abspath(path))
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
                    if name.endswith(".py") and not _excluded(path, name, excludes):
                        add(path)
        elif os.path.exists(arg):
            if not _excluded(arg, os.path.basename(arg), excludes):
                add(arg)
        else:
            errors.append(FileError(arg, None, "no such file or directory"))
    return found, errors


def _line_of_offset(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def load_module(path: str) -> cst.Module:
    """Read and parse a file; raises :class:`SourceError` with the line of the problem where there is one.

    The module keeps the file's encoding (PEP 263 cookie or BOM) and newline style, so ``module.bytes`` round-trips.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SourceError(FileError(path, None, f"cannot read file: {exc.strerror or exc}")) from None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except SyntaxError as exc:  # unknown or malformed coding cookie
        raise SourceError(FileError(path, exc.lineno or 1, f"cannot decode file: {exc.msg}")) from None
    except UnicodeDecodeError as exc:
        line = _line_of_offset(data, exc.start)
        raise SourceError(FileError(path, line, f"cannot decode file as {encoding}: {exc.reason}")) from None
    try:
        return cst.parse_module(data)
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
