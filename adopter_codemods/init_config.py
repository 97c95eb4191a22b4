"""``adopter-codemods init``: write the LibCST codemod configuration into a project.

The configuration ships inside the package (``adopter_codemods/data/libcst.codemod.yaml``) so an installed wheel
can write it: it makes ``python -m libcst.tool codemod adopter_codemods.AdoptFast .`` resolve the short codemod
names, pass code through unformatted, and skip the directories ``scan`` never walks into (virtual environments,
build output, installed packages, VCS metadata), which LibCST would otherwise rewrite in place.
"""

from __future__ import annotations

from pathlib import Path

CONFIG_NAME = ".libcst.codemod.yaml"  # the name LibCST looks for, from the current directory upwards


def config_text() -> str:
    """The shipped configuration."""
    from importlib import resources  # here, not at import: it imports tempfile, which scan never needs

    return resources.files("adopter_codemods").joinpath("data", "libcst.codemod.yaml").read_text(encoding="utf-8")


def write_config(directory: Path, *, force: bool = False) -> Path:
    """Write the configuration into ``directory`` and return its path.

    Raises ``FileExistsError`` when one is already there and ``force`` is false: it may hold the user's settings.
    """
    path = directory / CONFIG_NAME
    with path.open("w" if force else "x", encoding="utf-8", newline="\n") as handle:
        handle.write(config_text())
    return path
