"""Per-site suppression (``# noqa``, ``# lint-ignore``, ``# lint-fixme``): judged in the core, honoured by the API,
``scan`` (text, JSON, SARIF), ``rewrite``, the LibCST codemods, Fixit and the pre-commit hooks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from libcst.codemod import CodemodContext, TransformSkip, TransformSuccess, transform_module

from adopter_codemods import AdoptAll, FuseDropoutLN
from adopter_codemods.api import rewrite_source, scan_source
from adopter_codemods.cli import main
from conftest import ROOT

DROP = "        hidden_states = self.dropout(hidden_states)"
# Two rules on one class: ADP005 (reported at the dropout statement) and ADP004 (the softmax statement).
SOURCE = f"""\
import torch
import torch.nn.functional as F
from torch import nn


class SelfOutput(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.LayerNorm = nn.LayerNorm(hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
{DROP}
        hidden_states = self.LayerNorm(hidden_states + input_tensor)
        return F.softmax(hidden_states, dim=-1)
"""


def _on_drop(replacement: str) -> str:
    assert DROP in SOURCE
    return SOURCE.replace(DROP, replacement)


def codes(source: str) -> list[str]:
    return [f.code for f in scan_source(source, ["all"])]


def test_unsuppressed_source_has_both_findings() -> None:
    assert codes(SOURCE) == ["ADP005", "ADP004"]


@pytest.mark.parametrize(
    "comment",
    [
        "# noqa: ADP005",
        "# noqa:ADP005",
        "# noqa: E501, ADP005",
        "# noqa: E501 ADP005",
        "# noqa: FuseDropoutLN",
        "# noqa",
        "# lint-ignore: FuseDropoutLN",
        "# lint-ignore: FastSoftmax, FuseDropoutLN",
        "# lint-ignore: FuseDropoutLNRule",
        "# lint-fixme: FuseDropoutLN",
        "# lint-ignore: ADP005",
        "# lint-ignore",
        "# type: ignore  # noqa: ADP005",
    ],
)
def test_directive_on_the_reported_line(comment: str) -> None:
    source = _on_drop(f"{DROP}  {comment}")
    assert "ADP005" not in codes(source)
    rewritten = rewrite_source(source, ["all"])
    assert "self.dropout(hidden_states)" in rewritten.code  # the site is not rewritten
    assert "nn.Dropout(0.1)" in rewritten.code  # nor is its layer removed


@pytest.mark.parametrize("comment", ["# noqa: ADP004", "# noqa: E501", "# lint-ignore: FastSoftmax", "# noqa: ADP0055"])
def test_directive_for_other_codes_does_not_silence(comment: str) -> None:
    assert codes(_on_drop(f"{DROP}  {comment}")) == ["ADP005", "ADP004"]


def test_only_the_named_rule_is_silenced_and_the_other_still_rewritten() -> None:
    source = SOURCE.replace("return F.softmax(hidden_states, dim=-1)", "return F.softmax(hidden_states, dim=-1)  # noqa: ADP004")
    assert codes(source) == ["ADP005"]
    rewritten = rewrite_source(source, ["all"])
    assert "F.softmax(hidden_states, dim=-1)  # noqa: ADP004" in rewritten.code
    assert "self.LayerNorm(hidden_states, input_tensor)" in rewritten.code


def test_any_line_of_a_matched_statement_counts() -> None:
    # the second matched statement (the LayerNorm), and the last line of a statement spanning several lines
    ln = "        hidden_states = self.LayerNorm(hidden_states + input_tensor)"
    assert codes(SOURCE.replace(ln, ln + "  # noqa: ADP005")) == ["ADP004"]
    split = "        hidden_states = self.dropout(\n            hidden_states\n        )"
    assert codes(_on_drop(split)) == ["ADP005", "ADP004"]
    assert codes(_on_drop(split + "  # noqa: ADP005")) == ["ADP004"]
    assert codes(_on_drop(split.replace("(\n", "(  # noqa: ADP005\n"))) == ["ADP004"]


def test_fixit_directives_above_the_statement_but_not_noqa() -> None:
    assert codes(_on_drop(f"        # lint-ignore: FuseDropoutLN\n{DROP}")) == ["ADP004"]
    assert codes(_on_drop(f"        # lint-fixme: ADP005 not yet\n{DROP}")) == ["ADP004"]
    # flake8/ruff ignore a `# noqa` on its own line: so do we
    assert codes(_on_drop(f"        # noqa: ADP005\n{DROP}")) == ["ADP005", "ADP004"]


def test_module_header_lint_ignore_silences_the_rule_in_the_file() -> None:
    source = "# lint-ignore: FuseDropoutLN\n" + SOURCE
    assert codes(source) == ["ADP004"]
    assert "self.dropout(hidden_states)" in rewrite_source(source, ["all"]).code


def test_instantiation_and_sequential_sites_are_silenced_on_their_init_statement() -> None:
    source = (
        "from torch import nn\nfrom transformers.models.bert.modeling_bert import BertSelfAttention\n\n\n"
        "class Block(nn.Module):\n    def __init__(self, config):\n        super().__init__()\n"
        "        self.attn = BertSelfAttention(config)\n"
        "        self.head = nn.Sequential(\n            nn.Conv2d(3, 3, 3),\n            nn.BatchNorm2d(3),\n        )\n\n"
        "    def forward(self, x):\n        return self.head(self.attn(x)[0])\n"
    )
    assert codes(source) == ["ADP001", "ADP007"]
    silenced = source.replace("(config)\n", "(config)  # noqa: ADP001\n").replace("        )\n\n", "        )  # noqa\n\n")
    assert codes(silenced) == []
    assert rewrite_source(silenced, ["all"]).code == silenced


def test_a_silenced_site_keeps_the_layers_another_site_would_remove() -> None:
    # Both arms call the same dropout and LayerNorm: rewriting one arm alone must not delete the dropout the other
    # (silenced) arm still calls, so that arm takes the form that keeps the modules.
    source = (
        "from torch import nn\n\n\nclass Out(nn.Module):\n    def __init__(self, h):\n        super().__init__()\n"
        "        self.ln = nn.LayerNorm(h)\n        self.drop = nn.Dropout(0.1)\n\n"
        "    def forward(self, x, r, flag):\n        if flag:\n            x = self.drop(x)\n"
        "            x = self.ln(x + r)\n        else:\n            x = self.drop(x)\n            x = self.ln(x - r + r)\n"
        "        return x\n"
    )
    both = source.replace("self.ln(x - r + r)", "self.ln(x + r)")
    assert codes(both) == ["ADP005", "ADP005"]
    silenced = both.replace("            x = self.drop(x)\n            x = self.ln(x + r)\n        return", "            x = self.drop(x)  # noqa\n            x = self.ln(x + r)\n        return")
    assert codes(silenced) == ["ADP005"]
    code = rewrite_source(silenced, ["all"]).code
    assert "self.drop = nn.Dropout(0.1)" in code and "self.ln = nn.LayerNorm(h)" in code
    assert "x = adopter_kernels.dropout_add_layer_norm_module(x, r, self.ln, self.drop)" in code
    assert "            x = self.drop(x)  # noqa\n            x = self.ln(x + r)\n        return" in code


# ------------------------------------------------------------------------------------------- front-ends


@pytest.fixture
def silenced_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "model.py"
    path.write_text(_on_drop(f"{DROP}  # noqa: ADP005"), encoding="utf-8")
    return path


def test_scan_text_json_sarif(silenced_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", "--rules", "all", "--no-cache", "model.py"]) == 1
    out = capsys.readouterr().out
    assert "ADP004" in out and "ADP005" not in out
    assert main(["scan", "--no-cache", "--rules", "ADP005", "model.py"]) == 0  # the hook no longer fails forever
    capsys.readouterr()
    main(["scan", "--rules", "all", "--no-cache", "--format", "json", "model.py"])
    assert [f["code"] for f in json.loads(capsys.readouterr().out)["findings"]] == ["ADP004"]
    main(["scan", "--rules", "all", "--no-cache", "--format", "sarif", "model.py"])
    sarif = json.loads(capsys.readouterr().out)
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["ADP004"]
    # the SARIF fix is the rewrite, which leaves the silenced site alone
    fix = sarif["runs"][0]["results"][0]["fixes"][0]["artifactChanges"][0]["replacements"]
    assert not any("LayerNorm(hidden_states, input_tensor)" in r["insertedContent"]["text"] for r in fix)


def test_scan_cache_serves_the_suppressed_findings(silenced_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for _ in range(2):
        assert main(["scan", "--rules", "ADP005", "model.py"]) == 0
    silenced_file.write_text(SOURCE, encoding="utf-8")  # the comment removed: found again
    assert main(["scan", "--rules", "ADP005", "model.py"]) == 1


def test_rewrite_leaves_the_site(silenced_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = silenced_file.read_text(encoding="utf-8")
    assert main(["rewrite", "--rules", "ADP005", "--check", "model.py"]) == 0
    assert main(["rewrite", "--rules", "all", "model.py"]) == 0
    after = silenced_file.read_text(encoding="utf-8")
    assert after == rewrite_source(before, ["all"]).code and "self.dropout(hidden_states)  # noqa: ADP005" in after
    assert "adopter_kernels.softmax" in after


@pytest.mark.parametrize("codemod", [FuseDropoutLN, AdoptAll])
def test_libcst_codemods(codemod: type) -> None:
    silenced = _on_drop(f"{DROP}  # noqa: ADP005")
    result = transform_module(codemod(CodemodContext()), silenced)
    if codemod is FuseDropoutLN:
        assert isinstance(result, TransformSkip)
    else:
        assert isinstance(result, TransformSuccess)
        assert result.code == rewrite_source(silenced, ["all"]).code and "self.dropout(hidden_states)  # noqa" in result.code


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def test_libcst_tool_subprocess(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    silenced = _on_drop(f"        # lint-ignore: FuseDropoutLN\n{DROP}")
    path.write_text(silenced, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "libcst.tool", "codemod", "-x", "adopter_codemods.AdoptAll", "--no-format", str(path)],
        cwd=tmp_path, env=_env(), capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert path.read_text(encoding="utf-8") == rewrite_source(silenced, ["all"]).code != silenced


def test_fixit_reports_and_fixes_neither() -> None:
    from fixit.engine import LintRunner
    from fixit.ftypes import Config

    import adopter_codemods.lint as lint
    from adopter_codemods.rules import builtin_rules

    silenced = _on_drop(f"{DROP}  # noqa: ADP005")
    path = Path("model.py")
    runner = LintRunner(path, silenced.encode())
    rules = [getattr(lint, r.name)() for r in builtin_rules()]
    violations = list(runner.collect_violations(rules, Config(path=path)))
    assert [v.rule_name for v in violations] == ["FastSoftmax"]
    assert violations[0].autofixable  # the fix rewrites the other site, not the silenced one
    assert runner.apply_replacements(violations).code == rewrite_source(silenced, ["all"]).code


def test_pre_commit_hook_entries(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    silenced = _on_drop(f"{DROP}  # noqa").replace("dim=-1)\n", "dim=-1)  # lint-ignore: FastSoftmax\n")
    path.write_text(silenced, encoding="utf-8")
    hooks = ROOT / ".pre-commit-hooks.yaml"
    import yaml

    for hook in yaml.safe_load(hooks.read_text(encoding="utf-8")):
        argv = [sys.executable, *hook["entry"].split()[1:], "model.py"]
        proc = subprocess.run(argv, cwd=tmp_path, env=_env(), capture_output=True, text=True)
        assert proc.returncode == 0, (hook["id"], proc.stdout, proc.stderr)
    assert path.read_text(encoding="utf-8") == silenced
