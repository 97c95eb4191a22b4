"""BERT-base (random weights, batch 4 x 64 tokens, eval) in float16, original attention and its SDPA subclass (ADP001),
each against the same model in float64: how far float16 puts each from the exact output."""
import copy, torch, transformers, adopter_kernels as ak
from transformers.models.bert.modeling_bert import BertSelfAttention
torch.manual_seed(0)
m = transformers.BertModel(transformers.BertConfig()).eval()
x = torch.randint(0, 30000, (4, 64))
ref64 = copy.deepcopy(m).double()
r = copy.deepcopy(m).half()
for mod in r.modules():
    if type(mod) is BertSelfAttention:
        mod.__class__ = ak.bert_self_attention_sdpa(BertSelfAttention)
o = copy.deepcopy(m).half()
with torch.no_grad():
    e64 = ref64(x).last_hidden_state
    a = o(x).last_hidden_state.double(); b = r(x).last_hidden_state.double()
print("orig fp16 vs fp64", (a - e64).abs().max().item(), "sdpa fp16 vs fp64", (b - e64).abs().max().item(), "between", (a-b).abs().max().item(), "scale", e64.abs().max().item())
