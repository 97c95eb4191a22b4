"""Re-run cache for ``scan``: a file whose content was scanned before with the same rules and tool is not parsed
again, as linters do (ruff, mypy).

An entry is keyed on the SHA-256 of the file's bytes, the rules (their rule files' text, so an edited or a user
rule invalidates it) and the tool (its version and the source of the package, so a development checkout never
serves results of older code). It holds the findings without their path, so a renamed or copied file hits too,
unless class discovery read other files to resolve its base classes (``class_bases``): such an entry also records
the file's path, the search path and every look-up and file read (modification time and size), and serves only
while all of them are unchanged.
Entries live in ``$ADOPTER_CACHE_DIR`` or ``.adopter_cache/`` in the current directory (with a ``.gitignore``),
one small JSON file each (the findings and the skipped units), written atomically: parallel workers share the cache safely. ``--no-cache`` skips it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from pathlib import Path
from typing import Optional, Sequence

from . import __version__
from .dsl import Rule
from .class_bases import dependencies_unchanged
from .engine import Finding, Skip

DEFAULT_DIR = ".adopter_cache"
ENV_DIR = "ADOPTER_CACHE_DIR"
_FIELDS = [f.name for f in dataclasses.fields(Finding) if f.name != "path"]
_SKIP_FIELDS = [f.name for f in dataclasses.fields(Skip) if f.name != "path"]


@functools.lru_cache(maxsize=None)
def _tool_digest() -> str:
    """The version and every source file of the package."""
    import hashlib  # here and below: `scan --no-cache` never hashes

    digest = hashlib.sha256(__version__.encode())
    package = Path(__file__).resolve().parent
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _rules_digest(rules: Sequence[Rule]) -> str:
    import hashlib

    digest = hashlib.sha256()
    for rule in rules:
        digest.update(rule.code.encode())
        path = Path(rule.path)
        digest.update(path.read_bytes() if path.is_file() else repr(rule).encode())
    return digest.hexdigest()


class ScanCache:
    """Findings of earlier scans, by file content; see the module docstring."""

    def __init__(self, directory: Path, rules: Sequence[Rule]) -> None:
        import hashlib

        self.directory = directory
        self._salt = (_tool_digest() + _rules_digest(rules)).encode()
        self._sha256 = hashlib.sha256

    @classmethod
    def default(cls, rules: Sequence[Rule]) -> "ScanCache":
        return cls(Path(os.environ.get(ENV_DIR) or DEFAULT_DIR), rules)

    def _entry(self, data: bytes) -> Path:
        key = self._sha256(self._salt + data).hexdigest()
        return self.directory / key[:2] / f"{key}.json"

    def get(self, data: bytes, path: str) -> Optional[tuple[list[Finding], list[Skip]]]:
        """The findings and skipped units cached for this content, reported at `path`; None on a miss or an
        unreadable entry."""
        try:
            entry = json.loads(self._entry(data).read_text(encoding="utf-8"))
            if not dependencies_unchanged(entry["bases"], path):
                return None
            findings = [Finding(path=path, **{k: e[k] for k in _FIELDS}) for e in entry["findings"]]
            return findings, [Skip(path=path, **{k: e[k] for k in _SKIP_FIELDS}) for e in entry["skipped"]]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(
        self,
        data: bytes,
        findings: Sequence[Finding],
        skipped: Sequence[Skip] = (),
        bases: Optional[dict[str, object]] = None,
    ) -> None:
        """Store findings (and skipped units) for this content; `bases`: what class discovery read besides it
        (``ModuleStructure.dependencies``). A cache that cannot be written is silently not used."""
        entry = self._entry(data)
        payload = json.dumps(
            {
                "findings": [{k: getattr(f, k) for k in _FIELDS} for f in findings],
                "skipped": [{k: getattr(u, k) for k in _SKIP_FIELDS} for u in skipped],
                "bases": bases or {},
            }
        )
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            ignore = self.directory / ".gitignore"
            if not ignore.exists():
                ignore.write_text("# created by adopter-codemods scan\n*\n", encoding="utf-8")
            import tempfile

            fd, tmp = tempfile.mkstemp(dir=entry.parent, suffix=".tmp")
        except OSError:
            return
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(payload)
            os.replace(tmp, entry)  # readers see the whole entry or none
        except OSError:
            Path(tmp).unlink(missing_ok=True)
