"""T5-base (gpu_bench's T5Model, random weights, dropout off, batch 4 x 64 tokens) under float16 autocast, original
attention and its SDPA subclass (ADP002), each against the same model in float64: how far float16 autocast puts each
parameter gradient from the exact one (gpu_bench's equivalence pass: random cotangents on every output). Answers
whether `gpu_bench --dtype amp-fp16`'s T5 mismatch (run_cpu_amp_fp16_attention.sh) is the rewrite's error or float16's."""
import copy

import torch
import transformers
from transformers.models.t5.modeling_t5 import T5Attention

import adopter_kernels as ak
from adopter_kernels.equivalence import _run

torch.manual_seed(0)
config = transformers.T5Config(d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12, vocab_size=32128,
                               dropout_rate=0.0)
model = transformers.T5Model(config).eval()
ids = torch.randint(0, config.vocab_size, (4, 64))
kwargs = {"input_ids": ids, "decoder_input_ids": ids}
sdpa = copy.deepcopy(model)
for module in sdpa.modules():
    if type(module) is T5Attention:
        module.__class__ = ak.t5_attention_sdpa(T5Attention)


def grads(m: torch.nn.Module, autocast: bool) -> dict:
    with ak.use_backend("t5_attention=sdpa"):
        _run(m, (), kwargs, 0, lambda: torch.autocast("cpu", dtype=torch.float16, enabled=autocast))
    return {n: p.grad.detach().double() for n, p in m.named_parameters() if p.grad is not None}


exact = grads(copy.deepcopy(model).double(), False)
original, rewritten = grads(model, True), grads(sdpa, True)
scale = max(g.abs().max().item() for g in exact.values())
print(f"largest exact gradient {scale:.4g}")
worst = {}
for name in exact:
    errors = ((original[name] - exact[name]).abs().max().item(), (rewritten[name] - exact[name]).abs().max().item(),
              (rewritten[name] - original[name]).abs().max().item())
    worst[name] = errors
print(f"{'parameter':58} {'orig-exact':>11} {'sdpa-exact':>11} {'sdpa-orig':>11}")
for name, errors in sorted(worst.items(), key=lambda item: -item[1][2])[:8]:
    print(f"{name:58} " + " ".join(f"{e:11.4g}" for e in errors))
print("max over all parameters: original vs exact {:.4g}, SDPA vs exact {:.4g}, between {:.4g}".format(
    *(max(e[i] for e in worst.values()) for i in range(3))))
