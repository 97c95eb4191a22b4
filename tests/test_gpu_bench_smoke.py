"""CPU smoke tests of gpu_bench: the pipeline (rewrite -> load -> equivalence -> timing -> reports) end to end.

These check that the outputs are produced and equivalence is reported, never speed. Most tests inject a small
stand-in rewriter (no change to the code, findings from a regex) so the pipeline is tested independently of the
codemod core; ``test_real_rewriter_*`` use ``adopter_codemods.api.rewrite_source`` once it exists.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gpu_bench import cli  # noqa: E402
from gpu_bench.report import markdown  # noqa: E402
from gpu_bench.suite import SUITE, max_seq_len  # noqa: E402
from gpu_bench.timing import Timing, measure, measure_paired, paired_speedup  # noqa: E402
from gpu_bench.variants import make_variants  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HAS_API = importlib.util.find_spec("adopter_codemods.api") is not None


@dataclasses.dataclass
class FakeFinding:
    code: str
    rule: str


@dataclasses.dataclass
class FakeResult:
    code: str
    findings: list[FakeFinding]
    changed: bool


# Stand-in "rules": a finding per match, and an appended comment as the "rewrite" (semantics unchanged).
_PATTERNS = {
    "ADP005": ("FuseDropoutLN", r"nn\.LayerNorm\("),
    "ADP007": ("FuseConvBN", r"nn\.BatchNorm2d\("),
    "ADP008": ("FuseLinearBN", r"nn\.BatchNorm1d\("),
}


def fake_rewrite(source: str, rules: Iterable[str] | None = None, *, path: str = "<string>") -> FakeResult:
    assert rules is not None, "gpu_bench names the rules it runs (all, by default)"
    selected = set(_PATTERNS) if list(rules) == ["all"] else set(rules)
    findings = [
        FakeFinding(code, name)
        for code, (name, pattern) in _PATTERNS.items()
        if code in selected
        for _ in re.finditer(pattern, source)
    ]
    code = source + "".join(f"\n# adopted: {code}\n" for code in sorted({f.code for f in findings}))
    return FakeResult(code, findings, bool(findings))


def breaking_rewrite(source: str, rules: Iterable[str] | None = None, *, path: str = "<string>") -> FakeResult:
    """A wrong "rewrite": ReLU becomes GELU; the harness must catch it."""
    result = fake_rewrite(source, rules, path=path)
    return FakeResult(result.code.replace("self.act = nn.ReLU()", "self.act = nn.GELU()"), result.findings,
                      result.changed)


def _run(tmp_path: Path, *argv: str, rewrite=fake_rewrite) -> tuple[int, dict]:
    out = tmp_path / "out"
    code = cli.main(["--size", "tiny", "--device", "cpu", "--no-compile", "--out", str(out), *argv],
                    rewrite=rewrite)
    return code, json.loads((out / "results.json").read_text())


def test_cpu_smoke_suite_end_to_end(tmp_path: Path) -> None:
    code, payload = _run(tmp_path, "--models", "resnet,groupvit,dpt")
    assert code == 0
    assert payload["settings"]["size"] == "tiny" and payload["environment"]["torch"] == torch.__version__
    assert "--models resnet,groupvit,dpt" in payload["command"]
    by_name = {model["name"]: model for model in payload["models"]}
    assert set(by_name) == {"resnet", "groupvit", "dpt"}
    assert by_name["resnet"]["findings"] == {"ADP007": 4}  # stem + 2 blocks + projection shortcut
    assert by_name["groupvit"]["findings"] == {"ADP008": 3}
    for model in payload["models"]:
        names = [v["name"] for v in model["variants"]]
        assert names[0] == "vanilla" and len(names) == 2, names
        for variant in model["variants"]:
            assert "error" not in variant, variant.get("error")
            for mode in ("train", "inference"):
                assert variant[mode]["samples_per_s"] > 0 and len(variant[mode]["times_s"]) == 3
            assert variant["speedup"]["train"] > 0
        rewritten = model["variants"][1]
        assert rewritten["equivalence"]["ok"], rewritten["equivalence"]
        assert set(rewritten["equivalence"]["max_abs_diff"]) == {"eval", "train"}
    table = (tmp_path / "out" / "results.md").read_text()
    assert "| resnet (b=2) | ADP007 FuseConvBN x4 | ok" in table
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "out" / "results.png").stat().st_size > 0


def test_transformers_model_built_from_source(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    # --rules restricts what is tried; with one applicable rule there is no separate "all" variant.
    code, payload = _run(tmp_path, "--models", "bert", "--rules", "ADP005,ADP008", "--repeats", "1")
    assert code == 0
    (bert,) = payload["models"]
    assert bert["seq_len"] == 16 and bert["batch_size"] == 2
    assert [v["name"] for v in bert["variants"]] == ["vanilla", "ADP005"]
    assert bert["variants"][1]["equivalence"]["ok"]
    assert payload["environment"]["transformers"]


def test_non_equivalent_rewrite_is_reported_and_fails_the_run(tmp_path: Path) -> None:
    code, payload = _run(tmp_path, "--models", "groupvit", "--repeats", "1", rewrite=breaking_rewrite)
    assert code == 1
    eq = payload["models"][0]["variants"][1]["equivalence"]
    assert not eq["ok"] and any("output" in m for m in eq["mismatches"])
    assert "not equivalent" in (tmp_path / "out" / "results.md").read_text()


def test_make_variants_one_per_rule_plus_all() -> None:
    source = "nn.LayerNorm(4)\nnn.BatchNorm2d(4)\nnn.BatchNorm2d(8)\n"
    variants = make_variants(source, "x.py", fake_rewrite)
    assert [(v.name, v.rules) for v in variants] == [
        ("vanilla", ()), ("ADP005", ("ADP005",)), ("ADP007", ("ADP007",)), ("all", ("ADP005", "ADP007")),
    ]
    assert variants[-1].findings == {"ADP005": 1, "ADP007": 2}
    assert variants[0].source == source
    assert [v.name for v in make_variants("plain = 1\n", "x.py", fake_rewrite)] == ["vanilla"]


def test_measure_counts_calls_and_reports_memory() -> None:
    calls = []
    timing = measure(lambda: calls.append(torch.ones(256, 256).sum()), device=torch.device("cpu"),
                     batch_size=4, warmup=2, repeats=3)
    assert len(calls) == 5 and len(timing.times_s) == 3
    summary = timing.summary()
    assert summary["min_s"] <= summary["median_s"] <= summary["max_s"]
    assert summary["samples_per_s"] == pytest.approx(4 / summary["median_s"])
    assert timing.peak_mem_bytes is not None and timing.memory_method
    with pytest.raises(ValueError, match="at least 1"):
        measure(lambda: None, device=torch.device("cpu"), batch_size=1, warmup=0, repeats=1)


def test_measure_paired_alternates_the_order_of_each_round() -> None:
    calls: list[str] = []
    first, second = measure_paired((lambda: calls.append("a"), lambda: calls.append("b")),
                                   device=torch.device("cpu"), batch_size=2, warmup=2, repeats=4)
    # warm-up: a twice, b twice; then rounds a b | b a | a b | b a
    assert "".join(calls) == "aabb" + "abbaabba"
    assert len(first.times_s) == len(second.times_s) == 4 and first.peak_mem_bytes is None


def test_paired_speedup_is_the_median_of_per_round_ratios() -> None:
    def timing(times: list[float]) -> Timing:
        return Timing(times, 1, 0.0, None, "")

    # Round 3 is slow for both (a load spike): the ratio stays 2, unlike the ratio of medians of unpaired runs.
    fast = paired_speedup(timing([2.0, 2.0, 20.0, 2.0]), timing([1.0, 1.0, 10.0, 1.0]))
    assert fast["median"] == 2.0 and fast["beyond_noise"]
    same = paired_speedup(timing([1.0, 1.1, 0.9, 1.0]), timing([1.0, 1.0, 1.0, 1.05]))
    assert same["q1"] <= 1.0 <= same["q3"] and not same["beyond_noise"]


def test_interleaved_run_reports_paired_speedups(tmp_path: Path) -> None:
    code, payload = _run(tmp_path, "--models", "resnet", "--interleave", "--repeats", "3")
    assert code == 0 and payload["settings"]["interleave"]
    vanilla, rewritten = payload["models"][0]["variants"]
    for mode in ("train", "inference"):
        # the A/A control: vanilla against a vanilla twin
        assert vanilla["speedup"][mode] == vanilla["paired"][mode]["median"] > 0
        paired = rewritten["paired"][mode]
        assert paired["q1"] <= paired["median"] <= paired["q3"]
        assert rewritten["speedup"][mode] == paired["median"]
        assert len(rewritten[mode]["times_s"]) == 3 and rewritten[mode]["peak_mem_bytes"] is None
    table = (tmp_path / "out" / "results.md").read_text()
    assert "Interleaved timing" in table and re.search(r"\dx \[\d\.\d\d-\d\.\d\d\]", table)


def test_fp16_runs_float16_models_and_times_only_the_modes_asked(tmp_path: Path) -> None:
    """``--dtype fp16``: float16 weights and float inputs (token ids stay integers), equivalence at fp16's
    tolerance; ``--modes inference`` times inference alone (the table shows '-' for training)."""
    code, payload = _run(tmp_path, "--models", "resnet,bert", "--dtype", "fp16", "--modes", "inference",
                         "--repeats", "2", rewrite=fake_rewrite)
    assert code == 0
    settings = payload["settings"]
    assert settings["dtype"] == "fp16" and settings["modes"] == ["inference"] and not settings["autocast"]
    assert (settings["rtol"], settings["atol"]) == (2e-2, 2e-2)
    for model in payload["models"]:
        for variant in model["variants"]:
            assert "train" not in variant and len(variant["inference"]["times_s"]) == 2
            assert variant["equivalence"] is None or variant["equivalence"]["ok"]
    table = (tmp_path / "out" / "results.md").read_text()
    assert re.search(r"\| resnet \(b=\d+\) \| vanilla \| - \| - \| - \| - \| - \| - \| [\d,.]+ \|", table)


def test_fp16_places_weights_and_float_inputs_in_float16() -> None:
    from gpu_bench.runner import BenchConfig, _place, _to_device

    config = BenchConfig(size="tiny", device=torch.device("cpu"), dtype="fp16", models=["bert"])
    model = _place(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2)), config)
    assert {t.dtype for t in model.state_dict().values() if t.is_floating_point()} == {torch.float16}
    moved = _to_device(((torch.zeros(2), torch.zeros(2, dtype=torch.long)), {"x": torch.ones(1)}), config.device,
                       half=True)
    assert moved[0][0].dtype == torch.float16 and moved[0][1].dtype == torch.long
    assert moved[1]["x"].dtype == torch.float16
    fp32 = dataclasses.replace(config, dtype="fp32")
    assert next(_place(torch.nn.Linear(2, 2), fp32).parameters()).dtype == torch.float32


def test_amp_fp16_runs_under_float16_autocast_and_scales_the_loss(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``--dtype amp-fp16``: float32 weights, forward passes under float16 autocast (timed and in the equivalence
    check), and training steps through a gradient scaler, as float16 mixed precision trains."""
    from gpu_bench.runner import BenchConfig, _steps

    seen: list[torch.dtype | None] = []

    class Probe(torch.nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
            return super().forward(x)

    scales: list[float] = []
    real_scale = torch.amp.GradScaler.scale
    monkeypatch.setattr(torch.amp.GradScaler, "scale",
                        lambda self, loss: scales.append(self.get_scale()) or real_scale(self, loss))
    config = BenchConfig(size="tiny", device=torch.device("cpu"), dtype="amp-fp16", models=["bert"])
    torch.manual_seed(0)
    model = Probe(4, 4)
    before = model.weight.detach().clone()
    steps = _steps(model, ((torch.randn(3, 4),), {}), config)
    steps["train"]()
    steps["inference"]()
    assert seen == [torch.float16, torch.float16] and scales and scales[0] > 1
    assert model.weight.dtype == torch.float32 and not torch.equal(model.weight.detach(), before)

    code, payload = _run(tmp_path, "--models", "bert", "--dtype", "amp-fp16", "--repeats", "1")
    assert code == 0
    settings = payload["settings"]
    assert settings["dtype"] == "amp-fp16" and settings["autocast"] and (settings["rtol"], settings["atol"]) == (
        5e-2, 5e-2)
    assert all(v["equivalence"] is None or v["equivalence"]["ok"] for v in payload["models"][0]["variants"])


def test_results_are_written_after_each_model_so_an_interrupted_run_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    seen: list[dict] = []
    run_model = cli.run_suite.__globals__["run_model"]

    def interrupt_on_second(spec, *args, **kwargs):  # what a time limit or Ctrl-C does to a long run
        if spec.name == "groupvit":
            seen.append(json.loads((out / "results.json").read_text()))
            raise KeyboardInterrupt
        return run_model(spec, *args, **kwargs)

    monkeypatch.setitem(cli.run_suite.__globals__, "run_model", interrupt_on_second)
    with pytest.raises(KeyboardInterrupt):
        cli.main(["--size", "tiny", "--device", "cpu", "--no-compile", "--out", str(out),
                  "--models", "resnet,groupvit,dpt"], rewrite=fake_rewrite)
    (partial,) = seen
    assert [model["name"] for model in partial["models"]] == ["resnet"]
    assert partial["pending"] == ["groupvit", "dpt"]
    assert "**incomplete run**: stopped before groupvit, dpt" in (out / "results.md").read_text()


def test_markdown_lists_skipped_models() -> None:
    payload = {
        "command": "python -m gpu_bench",
        "environment": {"torch": "x", "python": "3", "cpu": "cpu"},
        "settings": {"size": "tiny", "dtype": "fp32", "device": "cpu", "repeats": 1, "warmup": 1,
                     "rtol": 1e-4, "atol": 1e-5},
        "models": [{"name": "bert", "skipped": "bert: needs transformers", "variants": []}],
    }
    assert "- bert: skipped: bert: needs transformers" in markdown(payload)


def test_cli_help_and_usage_errors() -> None:
    result = subprocess.run([sys.executable, "-m", "gpu_bench", "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0
    for text in ("--size", "--compile", "--rules", "exit status", *SUITE):
        assert text in result.stdout
    result = subprocess.run([sys.executable, "-m", "gpu_bench", "--models", "nosuch"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "unknown model(s) nosuch" in result.stderr
    result = subprocess.run([sys.executable, "-m", "gpu_bench", "--modes", "infer"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--modes takes train and/or inference, not infer" in result.stderr


def test_a_seq_len_beyond_a_models_positions_is_a_usage_error(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Found before any model runs (ViLT's embedding would fail only after BERT's and GPT-2's minutes)."""
    with pytest.raises(SystemExit) as info:
        cli.main(["--size", "base", "--models", "bert,vilt,t5", "--seq-len", "128", "--out", str(tmp_path)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--seq-len 128 is more than these models' learned positions at --size base: vilt (40)" in err
    assert "bert" not in err.split("learned positions")[1] and "t5" not in err.split("learned positions")[1]
    assert max_seq_len("bert", "base") == 512 and max_seq_len("gpt2", "tiny") == 64
    assert max_seq_len("t5", "base") is None and max_seq_len("resnet", "base") is None


# Which models each rule must find something in (only checked for rules that exist in rules/ already).
_EXPECTED_FINDINGS = {"ADP005": "bert", "ADP007": "resnet", "ADP008": "groupvit"}


@pytest.mark.skipif(not HAS_API, reason="adopter_codemods.api (the codemod core) is not in the tree yet")
def test_real_rewriter_smoke(tmp_path: Path) -> None:
    """The real codemods on BERT and the reference CNN / GroupViT-style models: rules found, variants equivalent."""
    pytest.importorskip("transformers")
    from adopter_codemods.rules import builtin_rules

    code, payload = _run(tmp_path, "--models", "bert,resnet,groupvit", "--repeats", "1", rewrite=None)
    by_name = {model["name"]: model for model in payload["models"]}
    for rule in builtin_rules():
        if rule.code in _EXPECTED_FINDINGS:
            assert rule.code in by_name[_EXPECTED_FINDINGS[rule.code]]["findings"], rule.code
    for model in payload["models"]:
        assert "error" not in model, model.get("error")
        for variant in model["variants"][1:]:
            assert variant["equivalence"]["ok"], (model["name"], variant["name"], variant["equivalence"])
            assert "error" not in variant, variant["error"]
    assert code == 0


@pytest.mark.skipif(not HAS_API, reason="adopter_codemods.api (the codemod core) is not in the tree yet")
def test_unknown_rule_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--rules", "ADP005,NoSuchRule", "--models", "groupvit", "--out", str(tmp_path)])
    assert info.value.code == 2
    assert "unknown rule(s) NoSuchRule" in capsys.readouterr().err


def test_reference_models_real_rewrites_are_equivalent(tmp_path: Path) -> None:
    """The attention reference models with the real codemods: nanoGPT (ADP010's matmul form) and vit-pytorch's ViT
    (its einsum form, and ADP006), every variant equivalent to the model as written."""
    code, payload = _run(tmp_path, "--models", "nanogpt,vit_einsum", "--repeats", "1", rewrite=None)
    by_name = {model["name"]: model for model in payload["models"]}
    assert by_name["vit_einsum"]["findings"] == {"ADP006": 1, "ADP010": 1}
    assert "ADP010" in by_name["nanogpt"]["findings"]
    for model in payload["models"]:
        assert "error" not in model, model.get("error")
        for variant in model["variants"][1:]:
            assert variant["equivalence"]["ok"], (model["name"], variant["name"], variant["equivalence"])
    assert code == 0
