"""The rule DSL parser: good files parse to the expected AST; bad files fail with ``file:line:col: message``."""

from __future__ import annotations

from pathlib import Path

import pytest

from adopter_codemods.dsl import (
    Args,
    CallNode,
    Const,
    OpNode,
    RuleSyntaxError,
    Var,
    Wildcard,
    load_rule_file,
    parse_rule,
)
from adopter_codemods.rules import builtin_rules, load_rules, rules_dir, select_rules

ADP005 = """\
# comment line
rule FuseDropoutLN
code ADP005
summary "Dropout -> add -> LayerNorm"

init:
    torch.nn.Dropout(p=$p, inplace=False) -> $drop;
    torch.nn.LayerNorm(**$ln) -> $norm
    =>
    adopter_kernels.FusedDropoutAddLayerNorm(**$ln, dropout=$p) -> $norm

forward:
    $drop($a) -> $x;   # trailing comment
    $x + $r -> $b;
    $norm($b) -> $c
    =>
    $norm($a, $r) -> $c
"""


def test_adp005_parses_to_the_expected_ast() -> None:
    rule = parse_rule(ADP005, "adp005.adopter")
    assert (rule.name, rule.code, rule.summary, rule.path) == (
        "FuseDropoutLN",
        "ADP005",
        "Dropout -> add -> LayerNorm",
        "adp005.adopter",
    )
    assert rule.init is not None and rule.forward is not None
    drop, norm = rule.init.source
    assert drop == CallNode(
        ("torch.nn.Dropout",), None, Args((), (("p", Var("p")), ("inplace", Const(False)))), (Var("drop"),)
    )
    assert norm == CallNode(("torch.nn.LayerNorm",), None, Args(rest=Var("ln")), (Var("norm"),))
    assert rule.init.target == (
        CallNode(
            ("adopter_kernels.FusedDropoutAddLayerNorm",),
            None,
            Args((), (("dropout", Var("p")),), Var("ln")),
            (Var("norm"),),
        ),
    )
    assert rule.forward.source == (
        CallNode((), Var("drop"), Args((Var("a"),)), (Var("x"),)),
        OpNode("+", (Var("x"), Var("r")), (Var("b"),)),
        CallNode((), Var("norm"), Args((Var("b"),)), (Var("c"),)),
    )
    assert rule.forward.target == (CallNode((), Var("norm"), Args((Var("a"), Var("r"))), (Var("c"),)),)
    assert rule.init.line == 6 and rule.forward.line == 12


def test_unicode_arrows_constants_choices_wildcards_and_tuples() -> None:
    rule = parse_rule(
        """rule R
code ADP100
guard g1
guard g2
init:
    $cls:*.Attn(**$a) -> $m;
    (torch.nn.GELU | *.ACT2FN)[$k] -> $act
forward:
    torch.nn.functional.softmax($x, dim=-1, dtype=None) → $y; *; -$y → $n; 2.5 * $n -> $z
    ⇒
    pkg.fn($x, 'a', 3) → ($y, $z)
"""
    )
    assert rule.guards == ["g1", "g2"]
    assert rule.init is not None and rule.init.target is None
    attn, act = rule.init.source
    assert isinstance(attn, CallNode) and attn.type_var == Var("cls") and attn.types == ("*.Attn",)
    assert isinstance(act, CallNode) and act.subscript and act.types == ("torch.nn.GELU", "*.ACT2FN")
    assert rule.forward is not None
    softmax, star, neg, mul = rule.forward.source
    assert isinstance(softmax, CallNode) and softmax.args.keywords == (("dim", Const(-1)), ("dtype", Const(None)))
    assert star == Wildcard()
    assert neg == OpNode("neg", (Var("y"),), (Var("n"),))
    assert mul == OpNode("*", (Const(2.5), Var("n")), (Var("z"),))
    target = rule.forward.target[0]  # type: ignore[index]
    assert isinstance(target, CallNode)
    assert target.args.positional == (Var("x"), Const("a"), Const(3)) and target.outputs == (Var("y"), Var("z"))


def test_init_only_rule_with_factory_callee() -> None:
    rule = parse_rule(
        "rule A\ncode ADP001\ninit:\n  $cls:*.BertSelfAttention(**$a) -> $m\n"
        "  => adopter_kernels.bert_self_attention_sdpa($cls)(**$a) -> $m\n"
    )
    assert rule.forward is None and rule.init is not None and rule.init.target is not None
    target = rule.init.target[0]
    assert isinstance(target, CallNode)
    assert target.callee_args == Args((Var("cls"),)) and target.args.rest == Var("a")


def test_sequential_header() -> None:
    rule = parse_rule(
        "rule S\ncode ADP107\nsequential pkg.FusedSequential\ninit:\n torch.nn.Conv2d(**$c) -> $conv\n"
        "forward:\n $conv($x) -> $y => pkg.f($x, $conv) -> $y\n"
    )
    assert rule.sequential == "pkg.FusedSequential"


def test_container_header() -> None:
    rule = parse_rule(
        'rule C\ncode ADP110\ncontainer "$sm  $drop"\ninit:\n torch.nn.Softmax(dim=-1) -> $sm;\n'
        " torch.nn.Dropout(**$d) -> $drop\nforward:\n $sm($x) -> $p; ?$drop($p) -> $q => pkg.f($x, softmax=$sm, "
        "dropout=$drop) -> $q\n"
    )
    assert rule.container == ("sm", "drop")


_CONTAINER_RULE = (
    'rule X\ncode ADP100\ncontainer "{vars}"\ninit:\n torch.nn.Softmax(dim=-1) -> $sm;\n torch.nn.Dropout() -> $drop\n'
    "forward:\n $sm($x) -> $p; ?$drop($p) -> $q => {target} -> $q\n"
)


BAD: list[tuple[str, str, str]] = [
    # (rule text, expected "line:col", message fragment)
    ("rule X\nforward:\n  $a + $b -> $c => f($a) -> $c\n", "1:1", "missing header line 'code ...'"),
    ("code ADP100\nforward:\n  $a + $b -> $c => f($a) -> $c\n", "1:1", "missing header line 'rule ...'"),
    ("rule X\ncode Adp1\nforward:\n  $a + $b -> $c => f($a) -> $c\n", "2:6", "a rule code is capital letters then digits"),
    ("rule X\ncode ADP100\nforward:\n  $a + $b => f($a) -> $c\n", "4:11", "expected '->' and an output variable"),
    ("rule X\ncode ADP100\nforward:\n  $a + $b -> $c => f(!a) -> $c\n", "4:22", "unexpected character '!'"),
    ("rule X\ncode ADP100\nforward:\n  $a + $b -> $c => f($z) -> $c\n", "4:22", "$z is not bound"),
    ("rule X\ncode ADP100\nforward:\n  $a + $b -> $c\n  =>\n  g(\n    $a, $zzz) -> $c\n", "7:9", "$zzz is not bound"),
    ("rule X\ncode ADP100\nforward:\n  $l($a) -> $c => f($a) -> $c\n", "4:3", "layer $l is called"),
    (
        "rule X\ncode ADP100\nforward:\n  $a + $b -> $c => f($a) -> $c\nforward:\n  $a + $b -> $c => f($a) -> $c\n",
        "5:1",
        "duplicate section 'forward:'",
    ),
    ("rule X\ncode ADP100\nforward:\n  $a + $b -> $c\n", "5:1", "expected '=>' and a target pattern"),
    ("rule X\ncode ADP100\nforward:\n  $a + $b -> $c => f($a) -> $c; g($a) -> $c\n", "3:1", "exactly one call node"),
    ("rule X\ncode ADP100\nforward:\n  f(x=$a, $b) -> $c => f($a) -> $c\n", "4:11", "positional argument after keyword"),
    ("rule X\nrule Y\ncode ADP100\nforward:\n  $a + $b -> $c => f($a) -> $c\n", "2:1", "duplicate header 'rule'"),
    ("rule X\ncode ADP100\ninit:\n $l($a) -> $m\nforward:\n  $a + $b -> $c => f($a) -> $c\n", "3:1", "layer instantiations"),
    ("rule X\ncode ADP100\ninit:\n torch.nn.X() -> $m\n", "5:1", "missing section 'forward:'"),
    ("rule X Y\ncode ADP100\nforward:\n  $a + $b -> $c => f($a) -> $c\n", "1:8", "expected end of line after the 'rule'"),
    ("rule X\ncode ADP100\nforward:\n  f($a -> $c => f($a) -> $c\n", "4:8", "expected ',' or ')'"),
    ("rule X\ncode ADP100\ninit:\n torch.nn.X() -> $m => torch.nn.Y() -> $n\n", "4:40", "target output $n is not a source layer"),
    ("rule X\ncode ADP100\ninit:\n torch.nn.X() -> $m => torch.nn.Y($q) -> $m\n", "4:35", "target variable $q is not bound"),
    ("rule X\ncode ADP100\nforward:\n  $a -> $c => f($a) -> $c\n", "4:6", "expected '(' (layer call) or an operator"),
    ("rule X\ncode ADP100\nforward:\n  $a + $b -> c => f($a) -> $c\n", "4:14", "expected an output $variable"),
    ("rule X\ncode ADP100\nbogus\n", "3:1", "expected a header line"),
    ("rule X\ncode ADP100\nforward\n $a + $b -> $c => f($a) -> $c\n", "3:8", "expected ':' after 'forward'"),
    ("rule X\ncode ADP100\nforward:\n  f(**a) -> $c => f($a) -> $c\n", "4:7", "expected a variable after '**'"),
    ("rule X\ncode ADP100\nforward:\n  (A | ) -> $c => f($a) -> $c\n", "4:8", "expected a type name"),
    (_CONTAINER_RULE.format(vars="sm drop", target="f($x)"), "3:11", "'container' takes a quoted list of layer variables"),
    (_CONTAINER_RULE.format(vars="", target="f($x)"), "3:11", "'container' takes a quoted list of layer variables"),
    (_CONTAINER_RULE.format(vars="$sm $other", target="f($x)"), "3:11", "'container' names $other, which no 'init:'"),
    (_CONTAINER_RULE.format(vars="$sm $drop", target="f($x, $drop)").replace("?", ""), "3:11",
     "'container' leaves $drop out"),
    (_CONTAINER_RULE.format(vars="$sm $drop", target="$drop($x)"), "3:11", "'container' leaves $drop out"),
    (
        'rule X\ncode ADP100\nsequential p.S\ncontainer "$m"\ninit:\n torch.nn.X() -> $m\nforward:\n'
        " $m($x) -> $y => f($x, m=$m) -> $y\n",
        "4:11", "'container' and 'sequential' exclude each other",
    ),
    (
        'rule X\ncode ADP100\ncontainer "$m"\ninit:\n torch.nn.X() -> $m => torch.nn.Y() -> $m\nforward:\n'
        " $m($x) -> $y => f($x, m=$m) -> $y\n",
        "3:11", "'init:' cannot rewrite them",
    ),
    ('rule X\ncode ADP100\ncontainer "$m"\ninit:\n torch.nn.X() -> $m => torch.nn.Y() -> $m\n', "3:11",
     "'container' needs a 'forward:' section"),
]


@pytest.mark.parametrize("text,where,message", BAD, ids=[m for _, _, m in BAD])
def test_bad_rule_reports_file_line_col(text: str, where: str, message: str) -> None:
    with pytest.raises(RuleSyntaxError) as info:
        parse_rule(text, "bad.adopter")
    assert str(info.value).startswith(f"bad.adopter:{where}: "), str(info.value)
    assert message in str(info.value)
    line, col = (int(x) for x in where.split(":"))
    assert (info.value.path, info.value.line, info.value.col) == ("bad.adopter", line, col)


def test_rule_file_errors_name_the_file(tmp_path: Path) -> None:
    latin = tmp_path / "latin.adopter"
    latin.write_bytes(b"rule X\ncode ADP100\nsummary \"caf\xe9\"\n")
    with pytest.raises(RuleSyntaxError, match=r"latin\.adopter:1:1: not UTF-8"):
        load_rule_file(latin)
    unknown = tmp_path / "guarded.adopter"
    unknown.write_text("rule X\ncode ADP100\n\nguard no_such_guard\nforward:\n  $a + $b -> $c => f($a) -> $c\n")
    with pytest.raises(RuleSyntaxError, match=r"guarded\.adopter:4:1: .*no_such_guard"):
        load_rules([unknown])


def test_every_builtin_rule_file_parses_with_a_unique_code_and_name() -> None:
    files = sorted(rules_dir().glob("*.adopter"))
    assert files
    rules = builtin_rules()
    assert len(rules) == len(files)
    assert len({r.code for r in rules}) == len(rules) and len({r.name for r in rules}) == len(rules)
    for f in files:
        rule = load_rule_file(f)
        assert f.name.startswith(rule.code + "_"), f"{f.name} holds rule {rule.code}"


def test_select_rules_by_code_or_name_and_unknown_keys() -> None:
    assert [r.code for r in select_rules(["adp005", "FuseDropoutLN"])] == ["ADP005"]
    with pytest.raises(KeyError, match="ADP999"):
        select_rules(["ADP999"])
