"""Output formats of the command-line front-end: linter-style text, the JSON contract (docs/DESIGN.md §6), SARIF 2.1.0.

Also text diffs; the rule metadata shown (documentation, kernel targets) comes from the rule registry
(:mod:`.rules`), so nothing is hand-maintained per rule.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from . import __version__
from .dsl import Rule
from .engine import Finding, RefusedSite, Skip
from .files import FileError
from .rules import rule_doc, rule_targets
from .torchscript import PACKAGE, ScriptConflict

JSON_VERSION = 3  # 2: the "skipped" list; 3: each finding's "certainty"; the "refused" list (only with
# --show-refused) is additive
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
TOOL_NAME = "adopter-codemods"


_INLINE_CODE = re.compile(r"`([^`]+)`")


def plain(markdown: str) -> str:
    """A rule's Markdown documentation as plain text (a terminal, SARIF's ``text`` fields): inline code without its
    backquotes; indented code blocks stay as written."""
    return _INLINE_CODE.sub(r"\1", markdown)


# ------------------------------------------------------------------------------------------------- diffs


def unified_diff(old: str, new: str, path: str) -> str:
    """A unified diff of two versions of a file, applicable with ``patch -p0`` (or ``git apply -p0``)."""
    import difflib  # here and below: only diffs and SARIF fixes need it

    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), path, path)
    # difflib leaves a last line without newline unterminated; patch(1) spells that out.
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


@dataclass(frozen=True)
class Replacement:
    """Replace ``length`` characters at ``offset`` (0-based, in the decoded text) by ``text``."""

    offset: int
    length: int
    text: str


def text_replacements(old: str, new: str) -> list[Replacement]:
    """The minimal whole-line replacements turning ``old`` into ``new``, offsets into ``old``."""
    old_lines = old.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    starts = [0]
    for line in old_lines:
        starts.append(starts[-1] + len(line))
    import difflib

    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
    return [
        Replacement(starts[i1], starts[i2] - starts[i1], "".join(new_lines[j1:j2]))
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]


# ------------------------------------------------------------------------------------------------ results


@dataclass
class ScanResults:
    """Everything one ``scan`` found, files in input order. ``fixes`` maps a path to its complete rewrite."""

    files_scanned: int
    findings: list[Finding]
    errors: list[FileError]
    fixes: dict[str, list[Replacement]]
    skipped: list[Skip] = field(default_factory=list)  # classes/functions not analysed, files in input order
    refused: Optional[list[RefusedSite]] = None  # structural matches refused, when asked for (--show-refused)


def error_line(error: FileError) -> str:
    """``path:line: error: message`` (``path: error: message`` when the whole file is concerned)."""
    where = f"{error.path}:{error.line}" if error.line else error.path
    return f"{where}: error: {error.message}"


def skip_line(skip: Skip) -> str:
    """``path:line: note: class X not analysed: reason`` (for stderr: a skip is no finding and no error)."""
    return f"{skip.path}:{skip.line}: note: {skip.unit} not analysed: {skip.reason}"


def script_note(path: str, conflict: ScriptConflict) -> str:
    """``path:line: note: ...`` for a rewritten file that uses TorchScript's API (`torchscript.script_conflict`)."""
    kernels = ", ".join(f"{PACKAGE}.{k}" for k in conflict.kernels)
    return (
        f"{path}:{conflict.line}: note: this file uses TorchScript (`{conflict.marker}`); the rewrite calls {kernels}, "
        "which torch.jit.script cannot compile: if you script these models, leave the file out (--exclude) or run "
        "only the rules whose kernels script (docs/COMPILE_AND_TRACE.md)"
    )


def unscriptable_note(files: int, written: bool) -> str:
    """One ``note:`` for the rewritten files that do not use TorchScript's API but now call kernels it cannot
    compile (a model built from them may be scripted elsewhere)."""
    one = files == 1
    verb = ("now calls" if one else "now call") if written else "would call"
    them = "it" if one else "them"
    return (
        f"note: {files} rewritten file{'' if one else 's'} {verb} kernels torch.jit.script cannot compile "
        f"(torch.compile, torch.fx and torch.jit.trace work): if you script models built from {them}, "
        "see docs/COMPILE_AND_TRACE.md"
    )


def refused_line(site: RefusedSite) -> str:
    """``CODE refused at path:line:col: reason (line N)``; N: the line causing it, left out when unknown."""
    cause = f" (line {site.cause_line})" if site.cause_line is not None else ""
    return f"{site.code} refused at {site.path}:{site.line}:{site.col}: {site.reason}{cause}"


def format_text(results: ScanResults) -> str:
    """``path:line:col: CODE message`` per finding (`` [guarded]`` where a layer type is not certain), a
    :func:`refused_line` per refused site when asked for, then an :func:`error_line` per input that failed."""
    out = [f"{f.path}:{f.line}:{f.col}: {f.code} {f.message}{_certainty_suffix(f)}" for f in results.findings]
    out += [refused_line(r) for r in results.refused or ()]
    out += [error_line(e) for e in results.errors]
    return "".join(line + "\n" for line in out)


def _certainty_suffix(finding: Finding) -> str:
    """`` [guarded]`` for a site whose layer types are not certain (docs/DESIGN.md §4, guarded rewrites)."""
    return " [guarded]" if finding.certainty == "guarded" else ""


def summary(results: ScanResults) -> str:
    n = len(results.findings)
    fixable = sum(f.fixable for f in results.findings)
    files = len({f.path for f in results.findings})
    text = (
        f"{n} finding{'s' * (n != 1)} ({fixable} fixable) in {files} of {results.files_scanned} "
        f"file{'s' * (results.files_scanned != 1)}"
    )
    if results.refused:
        text += f"; {len(results.refused)} site{'s' * (len(results.refused) != 1)} refused"
    if results.skipped:
        many = len(results.skipped) != 1
        text += f"; {len(results.skipped)} class{'es' * many} or function{'s' * many} not analysed"
    if results.errors:
        text += f"; {len(results.errors)} input{'s' * (len(results.errors) != 1)} could not be processed"
    return text


def format_json(results: ScanResults) -> str:
    document = {
        "version": JSON_VERSION,
        "files_scanned": results.files_scanned,
        "findings": [f.to_json() for f in results.findings],
        "errors": [e.to_json() for e in results.errors],
        "skipped": [u.to_json() for u in results.skipped],
    }
    if results.refused is not None:
        document["refused"] = [r.to_json() for r in results.refused]
    return json.dumps(document, indent=2) + "\n"


def _artifact(path: str, root: str) -> dict[str, str]:
    # Code scanning wants paths relative to the repository root (the directory the scan runs in).
    absolute = os.path.abspath(path)
    rel = os.path.relpath(absolute, root)
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return {"uri": Path(absolute).as_uri()}
    from urllib.parse import quote  # SARIF only

    return {"uri": quote(Path(rel).as_posix()), "uriBaseId": "%SRCROOT%"}


def _rule_descriptor(rule: Rule) -> dict[str, object]:
    descriptor: dict[str, object] = {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary or rule.name},
        "defaultConfiguration": {"level": "warning"},
        "properties": {"tags": ["performance"], "targets": rule_targets(rule)},
    }
    doc = rule_doc(rule)
    if doc:
        descriptor["fullDescription"] = {"text": plain(doc.split("\n\n", 1)[0])}
        descriptor["help"] = {"text": plain(doc), "markdown": doc}
    return descriptor


def _refused_result(site: RefusedSite, root: str, index: dict[str, int]) -> dict[str, object]:
    """A refused site as a ``note`` result; the line causing the refusal is its related location."""
    region = {"startLine": site.line, "startColumn": site.col, "endLine": site.end_line, "endColumn": site.end_col}
    result: dict[str, object] = {
        "ruleId": site.code,
        "level": "note",
        "message": {"text": f"refused: {site.reason} [{site.rule} in {site.cls}.{site.function}]"},
        "locations": [{"physicalLocation": {"artifactLocation": _artifact(site.path, root), "region": region}}],
        "properties": {"refused": True, "category": site.category.value},
    }
    if site.code in index:
        result["ruleIndex"] = index[site.code]
    if site.cause_line is not None:
        result["relatedLocations"] = [
            {
                "id": 1,
                "message": {"text": "cause of the refusal"},
                "physicalLocation": {
                    "artifactLocation": _artifact(site.path, root),
                    "region": {"startLine": site.cause_line, "startColumn": site.cause_col},
                },
            }
        ]
    return result


def format_sarif(results: ScanResults, rules: Sequence[Rule], root: Optional[str] = None) -> str:
    """SARIF 2.1.0 for GitHub code scanning: one run, rules from the registry, a fix per fixable finding.

    A fixable finding's fix is its file's complete rewrite (the same edit ``rewrite`` makes), as minimal line-range
    replacements: rewrites of one file depend on each other (shared ``__init__`` edits, one added import), so the
    fixes of a file's findings are the same edit and applying one applies them all. Refused sites, when listed, are
    ``note`` results (see :func:`_refused_result`).
    """
    root = os.path.abspath(root or os.getcwd())
    index = {r.code: i for i, r in enumerate(rules)}
    sarif_results = []
    for f in results.findings:
        region = {"startLine": f.line, "startColumn": f.col, "endLine": f.end_line, "endColumn": f.end_col}
        location = {"physicalLocation": {"artifactLocation": _artifact(f.path, root), "region": region}}
        result: dict[str, object] = {
            "ruleId": f.code,
            "level": "warning" if f.fixable else "note",
            "message": {"text": f"{f.message} [{f.rule} in {f.cls}.{f.function}]{_certainty_suffix(f)}"},
            "locations": [location],
            "properties": {"certainty": f.certainty},
        }
        if f.code in index:
            result["ruleIndex"] = index[f.code]
        replacements = results.fixes.get(f.path)
        if f.fixable and replacements:
            result["fixes"] = [
                {
                    "description": {"text": f"Apply the Adopter rewrites of {os.path.basename(f.path)}"},
                    "artifactChanges": [
                        {
                            "artifactLocation": _artifact(f.path, root),
                            "replacements": [
                                {
                                    "deletedRegion": {"charOffset": r.offset, "charLength": r.length},
                                    "insertedContent": {"text": r.text},
                                }
                                for r in replacements
                            ],
                        }
                    ],
                }
            ]
        sarif_results.append(result)
    for r in results.refused or ():
        sarif_results.append(_refused_result(r, root, index))
    notifications = [
        {
            "level": "error",
            "message": {"text": e.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": _artifact(e.path, root),
                        **({"region": {"startLine": e.line}} if e.line else {}),
                    }
                }
            ],
        }
        for e in results.errors
    ]
    # Not analysed is not an error (the run succeeded), but the results are incomplete there.
    notifications += [
        {
            "level": "warning",
            "descriptor": {"id": "skipped"},
            "message": {"text": f"{u.unit} not analysed: {u.reason}"},
            "locations": [
                {"physicalLocation": {"artifactLocation": _artifact(u.path, root), "region": {"startLine": u.line}}}
            ],
        }
        for u in results.skipped
    ]
    run = {
        "tool": {
            "driver": {
                "name": TOOL_NAME,
                "version": __version__,
                "semanticVersion": __version__,
                "rules": [_rule_descriptor(r) for r in rules],
            }
        },
        "originalUriBaseIds": {"%SRCROOT%": {"uri": Path(root).as_uri().rstrip("/") + "/"}},
        "columnKind": "unicodeCodePoints",
        "results": sarif_results,
        "invocations": [{"executionSuccessful": not results.errors, "toolExecutionNotifications": notifications}],
    }
    return json.dumps({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}, indent=2) + "\n"
