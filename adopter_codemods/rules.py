"""The rule registry: the built-in rules parsed from ``rules/*.adopter``, plus user rule files.

A rule has one home: ``rules/ADPxxx_<module>.adopter`` holds its pattern and ``rules/ADPxxx_<module>.md`` beside it
its documentation (what / why / example / fix safety / limitations / performance). Everything else is derived
here: the codemod class (``adopter_codemods.commands``), the Fixit rule (``adopter_codemods.lint``), what
``explain``, ``list`` and SARIF show.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Iterable, Optional, Sequence

from . import guards
from .dsl import CallNode, Rule, RuleSyntaxError, load_rule_file


def rules_dir() -> Path:
    """Installed wheels carry the rules inside the package; a source checkout keeps them at the top level."""
    here = Path(__file__).resolve().parent
    packaged = here / "rules"
    return packaged if packaged.is_dir() else here.parent / "rules"


def load_rules(paths: Iterable[Path]) -> list[Rule]:
    """Parse rule files; unknown guards are reported like syntax errors (file, line)."""
    # Guards live in the built-in rule modules; importing them registers the names.
    from . import rule_guards  # noqa: F401

    rules = []
    for path in paths:
        rule = load_rule_file(path)
        for name in rule.guards:
            try:
                guards.get(name)
            except KeyError as exc:
                line = _line_of(path, f"guard {name}")
                raise RuleSyntaxError(str(path), line, 1, str(exc.args[0])) from None
        rules.append(rule)
    return rules


def _line_of(path: Path, text: str) -> int:
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if text in line:
            return i
    return 1


@functools.lru_cache(maxsize=None)
def builtin_rules() -> tuple[Rule, ...]:
    rules = load_rules(sorted(rules_dir().glob("*.adopter")))
    return tuple(sorted(rules, key=lambda r: r.code))


ALL = "all"  # `--rules all`: every built-in rule
FAST = "fast"  # `--rules fast`, the default: the built-in rules whose kernels take a fast path somewhere by default


def fast_by_default(rule: Rule) -> bool:
    """Whether the rule's kernels take a fast path on some device by default (its ``fast "..."`` header is not
    ``"none"``). The others rewrite to kernels that compute the original expression unless a backend is forced
    (``ADOPTER_KERNELS_BACKEND``): a diff with no speed-up, so they run only when selected by code, name or ``all``."""
    return rule.fast != "none"


def default_rules() -> list[Rule]:
    """The built-in rules run when none are named: those :func:`fast_by_default`."""
    return [r for r in builtin_rules() if fast_by_default(r)]


def load_user_rules(paths: Sequence[Path]) -> list[Rule]:
    """User rule files, each checked like a built-in and against the others: a code or name already taken (by a
    built-in rule or an earlier file) is reported at its header line, so that `--rules` selects one rule."""
    taken = {key.lower(): f"the built-in rule {r.code} {r.name}" for r in builtin_rules() for key in (r.code, r.name)}
    taken[ALL] = "`--rules all` (every built-in rule)"
    taken[FAST] = "`--rules fast` (the built-in rules with a fast path by default)"
    rules = load_rules(paths)
    for rule in rules:
        for header, what, key in (("code", "rule code", rule.code), ("rule", "rule name", rule.name)):
            owner = taken.get(key.lower())
            if owner is not None:
                line, col = rule.header_locations.get(header, (1, 1))
                raise RuleSyntaxError(rule.path, line, col, f"{what} {key!r} is taken by {owner}")
        taken.update(dict.fromkeys((rule.code.lower(), rule.name.lower()), f"the rule {rule.code} {rule.name} of {rule.path}"))
    return rules


def select_rules(keys: Optional[Sequence[str]] = None, extra_files: Sequence[Path] = ()) -> list[Rule]:
    """The rules to run: user rule files always run; `keys` (codes like ``ADP005`` or names like ``FuseDropoutLN``
    of built-in or user rules, ``fast`` for the built-ins :func:`fast_by_default`, ``all`` for every built-in) add
    more. Without keys: the user rules if files are given, else the ``fast`` ones. Every front-end
    (``scan``/``rewrite``, the codemods, the API) selects here.

    Raises KeyError naming the unknown keys and the known ones, RuleSyntaxError for a bad rule file.
    """
    builtin = list(builtin_rules())
    user = load_user_rules(extra_files)
    if not keys:
        return user or default_rules()
    rules = builtin + user
    index = {r.code.lower(): [r] for r in rules} | {r.name.lower(): [r] for r in rules}
    index |= {ALL: builtin, FAST: default_rules()}
    unknown = [k for k in keys if k.strip().lower() not in index]
    if unknown:
        known = ", ".join(f"{r.code} ({r.name})" for r in rules)
        raise KeyError(f"unknown rule(s) {', '.join(unknown)}; known rules: {known}, {FAST} or {ALL}")
    chosen: list[Rule] = []
    for key in keys:
        chosen += [r for r in index[key.strip().lower()] if r not in chosen]
    return chosen + [r for r in user if r not in chosen]


# ------------------------------------------------------------------------------------------- rule metadata


def rule_module(rule: Rule) -> str:
    """The rule's snake-case name, from its file name ``<CODE>_<module>.adopter``: the codemod's module under
    ``adopter_codemods.commands`` (``fuse_dropout_ln`` for ADP005) and its fixtures' directory suffix."""
    stem = Path(rule.path).stem
    prefix = f"{rule.code}_"
    return stem[len(prefix) :] if stem.startswith(prefix) else stem


def rule_doc_path(rule: Rule) -> Path:
    """The Markdown file documenting a rule: the rule file's name with ``.md``."""
    return Path(rule.path).with_suffix(".md")


def rule_doc(rule: Rule) -> Optional[str]:
    """The rule's documentation (its ``.md`` file) without the ``# `` of its heading line; None when it has none
    (a user rule file without a Markdown file beside it)."""
    try:
        text = rule_doc_path(rule).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return text.removeprefix("# ") or None


def doc_sections(doc: str) -> list[tuple[str, str]]:
    """Split a rule's documentation into ``(title, text)`` sections at ``**Title**:`` paragraphs; the intro has
    title ""."""
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in doc.splitlines():
        if line.startswith("**") and "**" in line[2:]:
            title, rest = line[2:].split("**", 1)
            sections.append((title.strip(), [rest.lstrip(":").strip()] if rest.lstrip(":").strip() else []))
        else:
            sections[-1][1].append(line)
    return [(title, "\n".join(lines).strip("\n")) for title, lines in sections if "".join(lines).strip()]


def rule_targets(rule: Rule) -> list[str]:
    """The kernels a rule rewrites to: the callables named in its target patterns, and its drop-in container."""
    names: list[str] = []
    for variant in (rule, *rule.alternatives):
        for item in (variant.init, variant.forward):
            if item is not None and item.target is not None:
                names.extend(t for node in item.target if isinstance(node, CallNode) for t in node.types)
        if variant.sequential:
            names.append(variant.sequential)
    return list(dict.fromkeys(names))
