"""Rewritten models under torch.fx, torch.compile (dynamo), torch.export and TorchScript tracing, against their
originals.

Models are rewritten by the repository's own API (``rewrite_source``) from source text: a ResNet-style CNN
(conv+BN as attributes and in ``nn.Sequential``: ADP007), a ViT/MaxViT-style encoder (attention core, softmax,
dropout+add+LN, Linear+GELU, q/k/v: ADP004/5/6/9/10), nanoGPT's attention with a causal ``masked_fill`` and attention
dropout (ADP010; dynamo and TorchScript only: fx cannot trace the original's ``math.sqrt(k.size(-1))``), a
LLaMA-style block (RMSNorm, rotary embedding, SwiGLU with a module activation and GeGLU with ``F.gelu``:
ADP011/12/13) and, for dynamo, tiny Hugging Face BERT and GPT-2 (ADP001/3/4/5/6). Each check runs with ``auto``
(what this CPU picks) and with the fast backends forced (what CUDA picks: folded BN, packed QKV, SDPA; the Triton
kernels cannot run here), and compares in float64 with tolerance 1e-9.
"""

from __future__ import annotations

import copy
import types
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest
import torch
from torch import fx, nn

import adopter_kernels as ak
from adopter_codemods.api import rewrite_source
from adopter_kernels.equivalence import compare_models, iter_leaves, load_source_as_module

ROOT = Path(__file__).resolve().parent.parent
TOL = {"rtol": 1e-9, "atol": 1e-9}
#: What CUDA's ``auto`` picks (on CPU these are forced; Triton cannot run here).
FAST = ("conv_bn2d=folded,linear_bn1d=folded,packed_qkv_linear=packed,bert_self_attention=sdpa,gpt2_attention=sdpa,"
        "attention_core=sdpa")
BACKENDS = ["auto", FAST]

VIT_SOURCE = '''
import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q = self.q(x)
        k = self.k(x)
        v = self.v(x)
        q = q.reshape(b, n, self.heads, d // self.heads).transpose(1, 2)
        k = k.reshape(b, n, self.heads, d // self.heads).transpose(1, 2)
        v = v.reshape(b, n, self.heads, d // self.heads).transpose(1, 2)
        probs = F.softmax(q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5, dim=-1)
        return self.proj((probs @ v).transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, dim, heads, p):
        super().__init__()
        self.attn = Attention(dim, heads)
        self.drop1 = nn.Dropout(p)
        self.norm1 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * dim, dim)
        self.drop2 = nn.Dropout(p)
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x):
        a = self.attn(x)
        a = self.drop1(a)
        x = self.norm1(a + x)
        h = self.fc1(x)
        h = self.act(h)
        h = self.fc2(h)
        h = self.drop2(h)
        x = self.norm2(h + x)
        return x


class Encoder(nn.Module):
    def __init__(self, dim=16, heads=4, depth=2, p=0.1):
        super().__init__()
        self.embed = nn.Linear(8, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads, p) for _ in range(depth)])
        self.pool = nn.Identity()
        self.head = nn.Linear(dim, 3)

    def forward(self, x):
        return self.head(self.pool(self.blocks(self.embed(x))).mean(dim=1))
'''


LLAMA_SOURCE = '''
import torch
import torch.nn.functional as F
from torch import nn


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class SwiGLU(nn.Module):
    def __init__(self, dim, inner):
        super().__init__()
        self.gate_proj = nn.Linear(dim, inner, bias=False)
        self.up_proj = nn.Linear(dim, inner, bias=False)
        self.down_proj = nn.Linear(inner, dim, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class GeGLU(nn.Module):
    def __init__(self, dim, inner):
        super().__init__()
        self.wi_0 = nn.Linear(dim, inner, bias=False)
        self.wi_1 = nn.Linear(dim, inner)
        self.wo = nn.Linear(inner, dim)

    def forward(self, x):
        return self.wo(F.gelu(self.wi_0(x)) * self.wi_1(x))


class Block(nn.Module):
    def __init__(self, dim=16, heads=2, max_positions=5):
        super().__init__()
        self.heads = heads
        self.norm = RMSNorm(dim)
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.mlp = SwiGLU(dim, 3 * dim)
        self.post_norm = RMSNorm(dim)
        self.geglu = GeGLU(dim, 2 * dim)
        head_dim = dim // heads
        inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float64), inv_freq)
        emb = torch.cat((angles, angles), dim=-1)
        # Persistent: a GraphModule keeps every buffer it reads as persistent, so the state dicts compare equal.
        self.register_buffer("cos_cached", emb.cos())
        self.register_buffer("sin_cached", emb.sin())

    def forward(self, x):
        b, n, d = x.shape
        h = self.norm(x)
        q = self.q_proj(h).view(b, n, self.heads, d // self.heads).transpose(1, 2)
        k = self.k_proj(h).view(b, n, self.heads, d // self.heads).transpose(1, 2)
        cos, sin = self.cos_cached, self.sin_cached  # built for the sequence length: fx cannot slice by a traced n
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        x = x + (q + k).transpose(1, 2).reshape(b, n, d)
        x = x + self.mlp(self.post_norm(x))
        return x + self.geglu(x)
'''


def _resnet_source() -> str:
    return (ROOT / "gpu_bench" / "models" / "resnet_cnn.py").read_text()


def _nanogpt_source() -> str:
    return (ROOT / "fixtures" / "ADP010_fuse_attention_core" / "nanogpt_block.py").read_text()


def _nanogpt(module: types.ModuleType) -> nn.Module:
    config = module.Config()
    config.dropout = 0.1  # attention dropout on: the module goes into the kernel call
    return module.CausalSelfAttention(config)


# name -> (source, build, inputs, rule codes the rewrite must contain, kernels it must call, fx node targets for
# feature extraction)
# vit-pytorch's spelling of the attention core: both products as torch.einsum (ADP010's einsum variants)
VIT_EINSUM_SOURCE = VIT_SOURCE.replace(
    """        probs = F.softmax(q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5, dim=-1)
        return self.proj((probs @ v).transpose(1, 2).reshape(b, n, d))""",
    """        probs = F.softmax(torch.einsum("b h i e, b h j e -> b h i j", q, k) * (d // self.heads) ** -0.5, dim=-1)
        out = torch.einsum("b h i j, b h j e -> b h i e", probs, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))""",
)
assert VIT_EINSUM_SOURCE != VIT_SOURCE
MODELS: Dict[str, Tuple[Any, ...]] = {
    "resnet": (_resnet_source, lambda m: m.build_model("tiny"), lambda: (torch.randn(2, 3, 16, 16),),
               {"ADP007"}, {"conv_bn2d"}, ["stem.3", "pool"]),
    "vit": (lambda: VIT_SOURCE, lambda m: m.Encoder(), lambda: (torch.randn(2, 5, 8),),
            {"ADP005", "ADP006", "ADP009", "ADP010"}, {"attention_core", "packed_qkv_linear"}, ["pool", "head"]),
    "vit_einsum": (lambda: VIT_EINSUM_SOURCE, lambda m: m.Encoder(), lambda: (torch.randn(2, 5, 8),),
                   {"ADP005", "ADP006", "ADP009", "ADP010"}, {"attention_core", "packed_qkv_linear"}, ["pool", "head"]),
    "nanogpt": (_nanogpt_source, _nanogpt, lambda: (torch.randn(2, 6, 16),), set(), {"attention_core"}, []),
    "llama": (lambda: LLAMA_SOURCE, lambda m: m.Block(), lambda: (torch.randn(2, 5, 16),),
              {"ADP011", "ADP012", "ADP013"}, {"rms_norm_module", "gated_linear_unit", "rotary_embedding"},
              ["q_proj", "mlp.down_proj", "geglu.wo"]),
}
#: Models whose *original* torch.fx cannot trace (nanoGPT calls math.sqrt on a traced size): no fx checks.
FX_UNTRACEABLE = {"nanogpt"}
FX_MODELS = [name for name in MODELS if name not in FX_UNTRACEABLE]


def _pair(name: str) -> Tuple[nn.Module, nn.Module, Tuple[torch.Tensor, ...]]:
    """(original, rewritten) float64 models with the same weights, and float64 inputs."""
    source, build, inputs, codes, kernels, _ = MODELS[name]
    text = source()
    result = rewrite_source(text, ["all"], path=f"{name}.py")
    assert {f.code for f in result.findings} >= codes
    assert all(f"adopter_kernels.{kernel}(" in result.code for kernel in kernels), result.code
    original = load_source_as_module(text, f"trace_{name}_original")
    rewritten = load_source_as_module(result.code, f"trace_{name}_rewritten")
    torch.manual_seed(0)
    model_o = build(original).double()
    model_r = build(rewritten).double()
    model_r.load_state_dict(model_o.state_dict(), strict=True)
    torch.manual_seed(1)
    args = tuple(t.double() for t in inputs())
    return model_o, model_r, args


#: Kernels that symbolic tracing traces through: they record the original ``bn(conv(x))`` call_module nodes.
TRACED_THROUGH = {"conv_bn2d", "linear_bn1d"}


def _nodes(graph: fx.Graph) -> List[Tuple[str, str, str]]:
    return [(n.op, n.name, str(n.target)) for n in graph.nodes]


def _kernel_calls(graph: fx.Graph) -> List[str]:
    return [n.target.__name__ for n in graph.nodes
            if n.op == "call_function" and getattr(n.target, "__module__", "").startswith("adopter_kernels")]


@pytest.mark.parametrize("backend", BACKENDS, ids=["auto", "fast"])
@pytest.mark.parametrize("name", FX_MODELS)
def test_fx_symbolic_trace_of_rewritten_model_is_equivalent(name: str, backend: str) -> None:
    original, rewritten, args = _pair(name)
    with ak.use_backend(backend):
        traced_o = fx.symbolic_trace(original)
        traced_r = fx.symbolic_trace(rewritten.train())  # traced in train mode, then run in both modes
        assert not _kernel_calls(traced_o.graph)
        if MODELS[name][4] - TRACED_THROUGH:
            assert _kernel_calls(traced_r.graph), "the kernels should be leaf calls in the graph"
        else:  # the original graph, node for node (names included: what feature extractors select by)
            assert _nodes(traced_r.graph) == _nodes(traced_o.graph)
        report = compare_models(traced_o, traced_r, args, **TOL)
        assert report.ok, report.mismatches[:5]
        report = compare_models(original, traced_r, args, **TOL)  # the traced rewrite equals the eager original
        assert report.ok, report.mismatches[:5]


def _feature_extractor(model: nn.Module, targets: List[str]) -> fx.GraphModule:
    """What torchvision's ``create_feature_extractor`` does, reduced to fx: trace, return the outputs of the
    ``call_module`` nodes of the given submodules, drop the rest of the graph."""
    traced = fx.symbolic_trace(model)
    nodes = {n.target: n for n in traced.graph.nodes if n.op == "call_module" and n.target in targets}
    assert set(nodes) == set(targets), sorted(nodes)
    output = next(n for n in traced.graph.nodes if n.op == "output")
    with traced.graph.inserting_before(output):
        traced.graph.output({t: nodes[t] for t in targets})
    traced.graph.erase_node(output)
    traced.graph.eliminate_dead_code()
    traced.recompile()
    return traced


@pytest.mark.parametrize("name", sorted(FX_UNTRACEABLE))
def test_fx_untraceable_originals_stay_untraceable_only(name: str) -> None:
    """fx fails on these originals themselves; the rewrite fails the same way (it changes no traced code there)."""
    original, rewritten, _ = _pair(name)
    for model in (original, rewritten):
        with pytest.raises(Exception):
            fx.symbolic_trace(model)


@pytest.mark.parametrize("backend", BACKENDS, ids=["auto", "fast"])
@pytest.mark.parametrize("name", FX_MODELS)
def test_fx_feature_extraction_of_rewritten_model(name: str, backend: str) -> None:
    original, rewritten, args = _pair(name)
    targets = MODELS[name][5]
    with ak.use_backend(backend):
        features_o = _feature_extractor(original, targets)
        features_r = _feature_extractor(rewritten, targets)
        for mode in (False, True):
            features_o.train(mode)
            features_r.train(mode)
            torch.manual_seed(2)
            out_o = features_o(*args)
            torch.manual_seed(2)
            out_r = features_r(*args)
            for target in targets:
                torch.testing.assert_close(out_r[target], out_o[target], **TOL)


def _graph_breaks(model: nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[int, List[str]]:
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(*args, **kwargs)
    return explanation.graph_break_count, [str(b.reason).split("\n")[0] for b in explanation.break_reasons]


@pytest.mark.parametrize("backend", BACKENDS, ids=["auto", "fast"])
@pytest.mark.parametrize("name", list(MODELS))
def test_dynamo_adds_no_graph_break_and_compiled_rewrite_is_equivalent(name: str, backend: str) -> None:
    original, rewritten, args = _pair(name)
    with ak.use_backend(backend):
        for mode in (False, True):
            original.train(mode)
            rewritten.train(mode)
            breaks_o, _ = _graph_breaks(original, args, {})
            breaks_r, reasons = _graph_breaks(rewritten, args, {})
            assert breaks_r <= breaks_o, reasons
            if not mode:  # inference: the cached-weight paths (folded BN, packed QKV) under the compiler
                with torch.no_grad():
                    assert _graph_breaks(rewritten, args, {})[0] <= _graph_breaks(original, args, {})[0]
        torch._dynamo.reset()
        compiled = copy.deepcopy(rewritten)
        compiled.compile(backend="eager", fullgraph=True)  # in place: same state-dict keys
        report = compare_models(original, compiled, args, **TOL)
        assert report.ok, report.mismatches[:5]
    torch._dynamo.reset()


def _hf_pair(name: str) -> Iterator[Tuple[nn.Module, nn.Module, Tuple[Any, ...], Dict[str, Any]]]:
    pytest.importorskip("transformers")
    from gpu_bench.suite import SUITE

    spec = SUITE[name]
    source = spec.source_path().read_text()
    result = rewrite_source(source, ["all"], path=str(spec.source_path()))
    original = load_source_as_module(source, f"{spec.module}__trace_o", package=spec.package)
    rewritten = load_source_as_module(result.code, f"{spec.module}__trace_r", package=spec.package)
    torch.manual_seed(0)
    model_o = spec.build(original, "tiny", False).double().eval()
    model_r = spec.build(rewritten, "tiny", False).double().eval()
    model_r.load_state_dict(model_o.state_dict(), strict=True)
    torch.manual_seed(1)
    args, kwargs = spec.inputs(original, "tiny", 2, 16)
    yield model_o, model_r, args, kwargs


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_dynamo_hugging_face_models_gain_no_graph_break(name: str) -> None:
    for original, rewritten, args, kwargs in _hf_pair(name):
        breaks_o, _ = _graph_breaks(original, args, kwargs)
        for backend in BACKENDS:
            with ak.use_backend(backend):
                breaks_r, reasons = _graph_breaks(rewritten, args, kwargs)
                assert breaks_r <= breaks_o, (backend, reasons)
                torch._dynamo.reset()
                compiled = torch.compile(rewritten, backend="eager")
                torch.manual_seed(0)  # dropout is off in these configs; seeded all the same
                out_o, out_r = original(*args, **kwargs), compiled(*args, **kwargs)
                for (path, a), (_, b) in zip(iter_leaves(out_o), iter_leaves(out_r)):
                    if isinstance(a, torch.Tensor):
                        torch.testing.assert_close(b, a, **TOL, msg=path)
        torch._dynamo.reset()


@pytest.mark.parametrize("precision", ["bfloat16", "autocast-bfloat16", "float16", "autocast-float16"])
def test_dynamo_half_precision_attention_size_test_adds_no_break_or_warning(precision: str) -> None:
    """With bfloat16 or float16 compute on CPU (layers in that dtype, or float32 ones under autocast to it) the SDPA
    subclasses test the size (and what is forced) while compiling too: no graph break the original lacks, and no
    warning from dynamo about the code it traces (autocast's dtype is read while tracing)."""
    import warnings

    for original, rewritten, args, kwargs in _hf_pair("bert"):
        if precision in ("bfloat16", "float16"):
            dtype = getattr(torch, precision)
            original, rewritten = original.to(dtype), rewritten.to(dtype)
            context: Any = torch.autocast("cpu", enabled=False)
        else:
            context = torch.autocast("cpu", dtype=getattr(torch, precision.split("-")[1]))
        with context, torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("error")
            breaks_o, _ = _graph_breaks(original.eval(), args, kwargs)
            breaks_r, reasons = _graph_breaks(rewritten.eval(), args, kwargs)
        assert breaks_r <= breaks_o, reasons
    torch._dynamo.reset()


def _outputs_and_grads(model: nn.Module, args: Tuple[Any, ...], seed: int) -> Dict[str, torch.Tensor]:
    """The output, and in training each parameter's gradient of a weighted sum of it, by parameter name."""
    torch.manual_seed(seed)
    out = model(*[a.detach().requires_grad_(a.is_floating_point()) for a in args])
    found = {"output": out.detach()}
    if torch.is_grad_enabled() and out.requires_grad:
        weights = torch.linspace(-1.0, 1.0, out.numel(), dtype=out.dtype).reshape(out.shape)
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        grads = torch.autograd.grad((out * weights).sum(), [dict(model.named_parameters())[n] for n in names],
                                    allow_unused=True)
        found.update({f"grad {n}": g for n, g in zip(names, grads) if g is not None})
    return found


@pytest.mark.parametrize("backend", BACKENDS, ids=["auto", "fast"])
@pytest.mark.parametrize("name", list(MODELS))
def test_torch_export_of_rewritten_model_is_equivalent(name: str, backend: str) -> None:
    """``torch.export`` (what replaces TorchScript for deployment) exports each rewritten model, in eval and in
    training; the exported program gives the eager original's outputs and parameter gradients (the same dropout
    draws under the same seed). Exporting reads the backend decision once, as compiling does."""
    original, rewritten, args = _pair(name)
    for mode in (False, True):
        original.train(mode)
        rewritten.train(mode)
        torch.export.export(original, args)  # the original exports: so must the rewrite
        with ak.use_backend(backend):
            exported = torch.export.export(rewritten, args).module()
        expected = _outputs_and_grads(original, args, seed=7)
        got = _outputs_and_grads(exported, args, seed=7)
        assert got.keys() == expected.keys()
        for key, value in expected.items():
            torch.testing.assert_close(got[key], value, **TOL, msg=f"{'train' if mode else 'eval'} {key}")


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_torch_export_of_hugging_face_models(name: str) -> None:
    """The rewritten tiny BERT and GPT-2 (ADP001/3/4/5/6) export as their originals do, and compute the same."""
    for original, rewritten, args, kwargs in _hf_pair(name):
        expected = original(*args, **kwargs)
        torch.export.export(original, args, kwargs)
        for backend in BACKENDS:
            with ak.use_backend(backend):
                exported = torch.export.export(rewritten, args, kwargs).module()
            for (path, a), (_, b) in zip(iter_leaves(expected), iter_leaves(exported(*args, **kwargs))):
                if isinstance(a, torch.Tensor):
                    torch.testing.assert_close(b, a, **TOL, msg=f"{backend} {path}")


@pytest.mark.parametrize("name", list(MODELS))
def test_torchscript_trace_of_rewritten_model(name: str) -> None:
    """``torch.jit.trace`` records the ops that ran: it works for every rule. ``torch.jit.script`` does not
    (kernels take modules and callables as arguments; docs/COMPILE_AND_TRACE.md)."""
    original, rewritten, args = _pair(name)
    for model in (original, rewritten):
        model.eval()
    with torch.no_grad():
        scripted = torch.jit.trace(rewritten, args, check_trace=False)
        torch.testing.assert_close(scripted(*args), original(*args), **TOL)


def test_torchscript_script_of_softmax_and_dropout_ln_rewrites() -> None:
    """ADP004 and ADP005 targets are scriptable (the scripted model runs the reference computation); the other
    kernels take modules or callables as arguments, which TorchScript functions cannot."""
    result = rewrite_source(VIT_SOURCE, ["ADP004", "ADP005"], path="vit.py")
    assert {f.code for f in result.findings} == {"ADP004", "ADP005"}
    original = load_source_as_module(VIT_SOURCE, "script_vit_original")
    rewritten = load_source_as_module(result.code, "script_vit_rewritten")
    torch.manual_seed(0)
    model_o = original.Encoder().double()
    model_r = rewritten.Encoder().double()
    model_r.load_state_dict(model_o.state_dict(), strict=True)
    scripted = torch.jit.script(model_r)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    for mode in (False, True):
        model_o.train(mode)
        scripted.train(mode)
        torch.manual_seed(4)
        expected = model_o(x)
        torch.manual_seed(4)
        torch.testing.assert_close(scripted(x), expected, **TOL)


def test_traced_graph_reads_training_mode_at_run_time() -> None:
    """A leaf call receives the module, so a graph traced in eval still applies dropout after ``.train()``."""
    _, rewritten, args = _pair("vit")
    traced = fx.symbolic_trace(rewritten.eval())
    traced.train()
    rewritten.train()
    torch.manual_seed(3)
    expected = rewritten(*args)
    torch.manual_seed(3)
    torch.testing.assert_close(traced(*args), expected, **TOL)
    traced.eval()
    with pytest.raises(AssertionError):
        torch.manual_seed(3)
        torch.testing.assert_close(traced(*args), expected, **TOL)


def test_module_namespace_is_unchanged() -> None:
    """fx.wrap patches names only while tracing: the public kernels are the plain functions otherwise."""
    assert isinstance(ak.softmax, types.FunctionType) and ak.softmax.__module__ == "adopter_kernels.softmax"


def _fixture_pair(case: str, rule: str) -> Tuple[nn.Module, nn.Module, Tuple[torch.Tensor, ...]]:
    """(original, rewritten, inputs) of a golden fixture, float64, the original's weights loaded strictly."""
    path = ROOT / "fixtures" / case
    source = path.read_text(encoding="utf-8")
    code = rewrite_source(source, [rule], path=str(path)).code
    assert code != source
    stem = "trace_" + path.stem
    torch.manual_seed(0)
    original, args = load_source_as_module(source, stem + "_original").make_example()
    rewritten, _ = load_source_as_module(code, stem + "_rewritten").make_example()
    original, rewritten = original.double(), rewritten.double()
    rewritten.load_state_dict(original.state_dict(), strict=True)
    return original, rewritten, tuple(a.double() for a in args)


def test_softmax_method_and_torch_forms_script_and_compile() -> None:
    """ADP004's torch.softmax / Tensor.softmax drop-ins are scriptable (typed like the APIs) and add no graph break."""
    original, rewritten, args = _fixture_pair("ADP004_fast_softmax/tensor_method_and_torch_softmax.py", "ADP004")
    torch.testing.assert_close(torch.jit.script(rewritten)(*args), original(*args), **TOL)
    assert torch._dynamo.explain(rewritten)(*args).graph_break_count == 0
    torch._dynamo.reset()


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize(
    "case,kernel",
    [("prenorm_block.py", "dropout_add_layer_norm_residual"), ("postln_functional_dropout.py", "dropout_add_layer_norm_module")],
)
def test_module_taking_forms_compile_and_trace(case: str, kernel: str, mode: str) -> None:
    """ADP005's pre-LN call and its post-LN call with F.dropout: no graph break; under fx a leaf taking the modules
    (a Dropout module's train/eval is read at run time; `training=self.training` is a constant of the traced graph,
    as it is for the original's F.dropout)."""
    original, rewritten, args = _fixture_pair(f"ADP005_fuse_dropout_ln/{case}", "ADP005")
    original.train(mode == "train")
    rewritten.train(mode == "train")
    assert torch._dynamo.explain(rewritten)(*args).graph_break_count == 0
    torch._dynamo.reset()
    traced = fx.symbolic_trace(rewritten)
    assert any(n.target is getattr(ak, kernel) for n in traced.graph.nodes)
    torch.manual_seed(2)
    expected = original(*args)
    torch.manual_seed(2)
    torch.testing.assert_close(traced(*args), expected, **TOL)
