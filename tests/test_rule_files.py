"""User rule files (``--rule-file``): selectable with ``--rules``, any ``[A-Z]+[0-9]+`` code, collisions with
built-ins refused at their header line, and one semantics for ``rewrite``/``scan``, the codemods and the API: the
files' rules run, plus the rules ``--rules`` (or the codemod) names."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from libcst.codemod import CodemodContext, TransformSuccess, transform_module

from adopter_codemods import AdoptAll, ApplyRuleFiles, FastSoftmax
from adopter_codemods.api import rewrite_source
from adopter_codemods.cli import main
from adopter_codemods.dsl import RuleSyntaxError
from adopter_codemods.rules import builtin_rules, select_rules
from conftest import FIXTURES, ROOT

ADP005_RULE = next((ROOT / "rules").glob("ADP005_*.adopter")).read_text(encoding="utf-8")
USER_RULE = ADP005_RULE.replace("code ADP005", "code MY105").replace("rule FuseDropoutLN", "rule MyFusion")
RULE_AT = f"{USER_RULE.splitlines().index('rule MyFusion') + 1}:6"  # the header values' line:col
OWN_CODE = USER_RULE.replace("code MY105", "code MY106")
CODE_AT = f"{USER_RULE.splitlines().index('code MY105') + 1}:6"
# An ADP005 site (MyFusion matches it too) and an ADP004 site.
MODEL = """\
import torch.nn.functional as F
from torch import nn


class SelfOutput(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.LayerNorm = nn.LayerNorm(hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dropout(hidden_states)
        hidden_states = self.LayerNorm(hidden_states + input_tensor)
        return F.softmax(hidden_states, dim=-1)
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text(MODEL, encoding="utf-8")
    (tmp_path / "my.adopter").write_text(USER_RULE, encoding="utf-8")
    return tmp_path


def scan_codes(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    main(["scan", "--no-cache", "--format", "json", "model.py", *argv])
    return [f["code"] for f in json.loads(capsys.readouterr().out)["findings"]]


def test_user_rules_are_selectable_by_code_or_name(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for key in ("MY105", "my105", "MyFusion"):
        assert scan_codes(capsys, "--rules", key, "--rule-file", "my.adopter") == ["MY105"]
    assert scan_codes(capsys, "--rules", "ADP004,MY105", "--rule-file", "my.adopter") == ["MY105", "ADP004"]
    # without the file the code is unknown
    assert main(["scan", "model.py", "--rules", "MY105"]) == 2
    assert "unknown rule(s) MY105" in capsys.readouterr().err


def test_selection_semantics(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert scan_codes(capsys) == []  # no file: the `fast` built-ins; ADP004/ADP005 run the original by default
    assert scan_codes(capsys, "--rules", "all") == ["ADP005", "ADP004"]  # every built-in
    assert [r.code for r in select_rules()] == [r.code for r in builtin_rules() if r.fast != "none"]
    assert select_rules() == select_rules(["fast"]) and len(select_rules()) < len(builtin_rules())
    assert scan_codes(capsys, "--rule-file", "my.adopter") == ["MY105"]  # a file: only its rules
    assert scan_codes(capsys, "--rules", "ADP004", "--rule-file", "my.adopter") == ["MY105", "ADP004"]
    assert scan_codes(capsys, "--rules", "all", "--rule-file", "my.adopter") == ["ADP005", "MY105", "ADP004"]
    user = select_rules(None, [project / "my.adopter"])
    assert [r.code for r in user] == ["MY105"]
    assert [r.code for r in select_rules(["all"], [project / "my.adopter"])] == [r.code for r in builtin_rules()] + ["MY105"]


def _write(project: Path, text: str) -> str:
    (project / "bad.adopter").write_text(text, encoding="utf-8")
    return "bad.adopter"


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        (USER_RULE.replace("code MY105", "code ADP005"), CODE_AT, "rule code 'ADP005' is taken by the built-in rule ADP005 FuseDropoutLN"),
        (OWN_CODE.replace("rule MyFusion", "rule FastSoftmax"), RULE_AT, "rule name 'FastSoftmax' is taken by the built-in rule ADP004"),
        (OWN_CODE.replace("rule MyFusion", "rule fusedropoutln"), RULE_AT, "rule name 'fusedropoutln' is taken by the built-in rule ADP005 FuseDropoutLN"),
        (OWN_CODE.replace("rule MyFusion", "rule All"), RULE_AT, "rule name 'All' is taken by `--rules all`"),
        (OWN_CODE.replace("rule MyFusion", "rule Fast"), RULE_AT, "rule name 'Fast' is taken by `--rules fast`"),
        (USER_RULE.replace("rule MyFusion", "rule Other"), CODE_AT, "rule code 'MY105' is taken by the rule MY105 MyFusion of my.adopter"),
        (USER_RULE.replace("code MY105", "code my105"), CODE_AT, "a rule code is capital letters then digits"),
    ],
    ids=["builtin-code", "builtin-name", "builtin-name-case", "all", "fast", "other-file", "bad-code"],
)
def test_collisions_and_bad_codes_are_located(
    project: Path, capsys: pytest.CaptureFixture[str], text: str, where: str, message: str
) -> None:
    bad = _write(project, text)
    assert main(["scan", "model.py", "--rule-file", "my.adopter", "--rule-file", bad]) == 2
    err = capsys.readouterr().err
    assert f"malformed rule file: {bad}:{where}: {message}" in err, err
    with pytest.raises(RuleSyntaxError):
        select_rules(None, [project / "my.adopter", project / bad])


def test_unbound_target_variable_points_at_its_use(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = USER_RULE.replace("    $norm($a, $r) -> $c", "    $norm($a,\n          $zzz) -> $c")
    bad = _write(project, text)
    line = text.splitlines().index("          $zzz) -> $c") + 1
    assert main(["rewrite", "model.py", "--rule-file", bad]) == 2
    assert f"bad.adopter:{line}:11: target variable $zzz is not bound" in capsys.readouterr().err


def test_markdown_beside_a_user_rule_documents_it(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def help_of_my_rule() -> object:
        main(["scan", "--no-cache", "--format", "sarif", "model.py", "--rule-file", "my.adopter"])
        rules = json.loads(capsys.readouterr().out)["runs"][0]["tool"]["driver"]["rules"]
        return next(r for r in rules if r["id"] == "MY105").get("help")

    assert help_of_my_rule() is None
    (project / "my.md").write_text("# MY105 MyFusion — fused `x`\n\n**What**: it.\n", encoding="utf-8")
    assert help_of_my_rule() == {
        "text": "MY105 MyFusion — fused x\n\n**What**: it.",
        "markdown": "MY105 MyFusion — fused `x`\n\n**What**: it.",
    }


def test_rewrite_and_apply_rule_files_agree(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rule_file = str(project / "my.adopter")
    only_file = transform_module(ApplyRuleFiles(CodemodContext(), rule_file=[rule_file]), MODEL)
    with_all = transform_module(AdoptAll(CodemodContext(), rule_file=[rule_file]), MODEL)
    with_one = transform_module(FastSoftmax(CodemodContext(), rule_file=[rule_file]), MODEL)
    assert isinstance(only_file, TransformSuccess) and isinstance(with_all, TransformSuccess)
    assert isinstance(with_one, TransformSuccess)
    assert "F.softmax(hidden_states" in only_file.code  # only the file's rule ran
    assert "F.softmax(hidden_states" not in with_one.code and "self.dropout" not in with_one.code
    for argv, result in (([], only_file), (["--rules", "all"], with_all), (["--rules", "ADP004"], with_one)):
        (project / "model.py").write_text(MODEL, encoding="utf-8")
        assert main(["rewrite", "model.py", "--rule-file", rule_file, *argv]) == 0
        assert (project / "model.py").read_text(encoding="utf-8") == result.code
        assert rewrite_source(MODEL, argv[1:] or None, rule_files=[Path(rule_file)]).code == result.code


def test_apply_rule_files_requires_a_rule_file() -> None:
    with pytest.raises(ValueError, match="ApplyRuleFiles needs at least one --rule-file"):
        ApplyRuleFiles(CodemodContext())


def _codemod(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "libcst.tool", "codemod", "--no-format", *argv],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )


def test_libcst_tool_without_rule_file_is_an_error(project: Path) -> None:
    proc = _codemod(project, "-x", "adopter_codemods.ApplyRuleFiles", "model.py")
    assert proc.returncode == 2 and "the following arguments are required: --rule-file" in proc.stderr
    assert (project / "model.py").read_text(encoding="utf-8") == MODEL


def test_libcst_tool_malformed_rule_file_is_one_located_message(project: Path) -> None:
    for i in range(3):
        (project / f"model_{i}.py").write_text(MODEL, encoding="utf-8")
    bad = _write(project, USER_RULE.replace("$norm($a, $r) -> $c", "$norm($a, $zzz) -> $c"))
    proc = _codemod(project, "-x", "adopter_codemods.AdoptAll", "--rule-file", bad, ".")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(re.findall(r"bad\.adopter:\d+:\d+: target variable \$zzz is not bound", proc.stderr)) == 1
    assert (project / "model_0.py").read_text(encoding="utf-8") == MODEL


def test_libcst_tool_apply_rule_files(project: Path) -> None:
    proc = _codemod(project, "-x", "adopter_codemods.ApplyRuleFiles", "--rule-file", "my.adopter", "model.py")
    assert proc.returncode == 0, proc.stderr
    assert (project / "model.py").read_text(encoding="utf-8") == rewrite_source(MODEL, rule_files=[project / "my.adopter"]).code


def test_the_api_takes_rule_objects_and_a_single_code() -> None:
    """`rewrite_source(src, select_rules(["ADP005"]))` raised AttributeError ('Rule' object has no attribute 'strip'),
    and one code given as a string was read letter by letter."""
    from adopter_codemods.api import rewrite_source, scan_source
    from adopter_codemods.rules import select_rules

    source = (FIXTURES / "ADP005_fuse_dropout_ln" / "bert_self_output.py").read_text(encoding="utf-8")
    expected = rewrite_source(source, ["ADP005"]).code
    assert expected != source
    assert rewrite_source(source, select_rules(["ADP005"])).code == expected
    assert rewrite_source(source, "ADP005").code == expected
    assert [f.code for f in scan_source(source, [*select_rules(["ADP004"]), "ADP005"])] == ["ADP005"]
    with pytest.raises(TypeError, match="rule codes or names"):
        scan_source(source, [5])  # type: ignore[list-item]
