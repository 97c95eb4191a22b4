"""Is the autofix of a finding used? Fixit 2.2 gives a rule no way to tell ``fixit lint`` from ``fixit fix``, yet
``fixit lint`` without ``--diff`` only prints "(has autofix)" for a replacement, after Fixit has diffed the whole
module for it (docs/PERFORMANCE.md). :func:`lint_without_diff` says when that is certainly the case; anything else
(``fixit fix``, ``fixit lint --diff``, the API, the VALID/INVALID harness, ``fixit lsp``, or no telling) keeps the fix.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from typing import Sequence

import click
import fixit
from fixit import cli


def lint_without_diff() -> bool:
    """True only inside ``fixit lint`` without ``--diff``: in its own process (the click context is Fixit's ``lint``
    command) or in one of the "spawn" workers it lints several files with, which see no click context but the
    parent's ``sys.argv`` (restored by multiprocessing), parsed here with Fixit's own command line definition."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        return ctx.command is cli.lint and ctx.params.get("diff") is False
    if multiprocessing.parent_process() is None or not _parent_ran_fixit_cli():
        return False
    return _parses_as_lint_without_diff(sys.argv[1:])


def _parent_ran_fixit_cli() -> bool:
    """The spawning process ran Fixit's command line: the ``fixit`` script (re-run here as ``__mp_main__``, it holds
    ``main``) or ``python -m fixit`` (``sys.argv[0]`` is ``fixit/__main__.py``, which multiprocessing does not
    re-run)."""
    if getattr(sys.modules.get("__mp_main__"), "main", None) is cli.main:
        return True
    fixit_main = os.path.join(os.path.dirname(fixit.__file__ or ""), "__main__.py")
    try:
        return bool(sys.argv) and os.path.samefile(sys.argv[0], fixit_main)
    except OSError:
        return False


def _parses_as_lint_without_diff(args: Sequence[str]) -> bool:
    # resilient_parsing: no eager callback (--help, --version) and no error; the parent parsed these same arguments.
    try:
        ctx = cli.main.make_context("fixit", list(args), resilient_parsing=True)
        name, command, rest = cli.main.resolve_command(ctx, [*ctx.protected_args, *ctx.args])
        if command is not cli.lint or name is None:
            return False
        return command.make_context(name, rest, parent=ctx, resilient_parsing=True).params.get("diff") is False
    except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort, IndexError):
        return False
