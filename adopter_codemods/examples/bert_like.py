"""A small BERT-like model with one instance of each pattern Adopter rewrites (one site per built-in rule).

Run ``python -m adopter_codemods demo`` to see the diff AdoptAll produces for this file (nothing is written).
The file is executable with torch and transformers installed: ``make_example()`` builds the model with tiny sizes.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertConfig, GPT2Config, T5Config
from transformers.models.bart.modeling_bart import BartAttention
from transformers.models.bert.modeling_bert import BertSelfAttention
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention
from transformers.models.t5.modeling_t5 import T5Attention


class Config:
    hidden_size = 32
    num_attention_heads = 4
    intermediate_size = 64
    hidden_dropout_prob = 0.1
    attention_probs_dropout_prob = 0.1
    layer_norm_eps = 1e-12


class SelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def split_heads(self, x):
        batch, seq, _ = x.shape
        return x.view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden_states):
        q = self.query(hidden_states)
        k = self.key(hidden_states)
        v = self.value(hidden_states)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = F.softmax(scores, dim=-1)
        probs = self.dropout(probs)
        context = torch.matmul(probs, v).transpose(1, 2)
        return context.reshape(context.shape[0], context.shape[1], -1)


class SelfOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        hidden_states = self.LayerNorm(hidden_states + input_tensor)
        return hidden_states


class Intermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = nn.GELU()

    def forward(self, hidden_states):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.intermediate_act_fn(hidden_states)
        return hidden_states


class Output(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.LayerNorm(self.dropout(hidden_states) + input_tensor)
        return hidden_states


class Layer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_output = SelfOutput(config)
        self.intermediate = Intermediate(config)
        self.output = Output(config)

    def forward(self, hidden_states):
        attention = self.attention_output(self.attention(hidden_states), hidden_states)
        return self.output(self.intermediate(attention), attention)


class PatchEmbedding(nn.Module):
    """A ResNet-like stem that turns an image into a sequence of patch embeddings."""

    def __init__(self, config, channels=3):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(channels, config.hidden_size, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(config.hidden_size),
            nn.ReLU(),
        )
        self.proj = nn.Conv2d(config.hidden_size, config.hidden_size, kernel_size=4, stride=4)
        self.norm = nn.BatchNorm2d(config.hidden_size)

    def forward(self, pixels):
        x = self.stem(pixels)
        x = self.proj(x)
        x = self.norm(x)
        return x.flatten(2).transpose(1, 2)


class ClassifierHead(nn.Module):
    def __init__(self, config, num_labels=3):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.norm = nn.BatchNorm1d(config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, num_labels)

    def forward(self, hidden_states):
        pooled = self.dense(hidden_states[:, 0])
        pooled = self.norm(pooled)
        return F.softmax(self.classifier(torch.tanh(pooled)), dim=-1)


class HubAttentions(nn.Module):
    """Attention layers imported from Hugging Face transformers, as copied model code often does."""

    def __init__(self, config):
        super().__init__()
        # Attention dropout 0: the SDPA kernels draw dropout noise differently from eager attention.
        heads = dict(num_attention_heads=config.num_attention_heads, attention_probs_dropout_prob=0.0)
        self.bert = BertSelfAttention(BertConfig(hidden_size=config.hidden_size, **heads))
        t5_config = T5Config(
            d_model=config.hidden_size,
            d_kv=config.hidden_size // config.num_attention_heads,
            num_heads=config.num_attention_heads,
            dropout_rate=0.0,
        )
        self.t5 = T5Attention(t5_config, has_relative_attention_bias=True)
        gpt2_config = GPT2Config(n_embd=config.hidden_size, n_head=config.num_attention_heads, attn_pdrop=0.0)
        self.gpt2 = GPT2Attention(gpt2_config)
        self.bart = BartAttention(config.hidden_size, config.num_attention_heads)

    def forward(self, hidden_states):
        hidden_states = self.bert(hidden_states)[0]
        hidden_states = self.t5(hidden_states)[0]
        hidden_states = self.gpt2(hidden_states)[0]
        return self.bart(hidden_states)[0]


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(x, cos, sin):
    x_embed = (x * cos) + (rotate_half(x) * sin)
    return x_embed


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


class GatedMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LlamaStyleBlock(nn.Module):
    """RMSNorm, rotary position embedding and a SwiGLU MLP, written as LLaMA-family decoders write them."""

    def __init__(self, config, max_positions=64):
        super().__init__()
        self.norm = RMSNorm(config.hidden_size, eps=1e-6)
        self.mlp = GatedMLP(config)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, config.hidden_size, 2) / config.hidden_size))
        angles = torch.outer(torch.arange(max_positions), inv_freq)
        emb = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, hidden_states):
        seq = hidden_states.shape[1]
        cos, sin = self.cos_cached[:seq], self.sin_cached[:seq]
        normed = apply_rotary_pos_emb(self.norm(hidden_states), cos, sin)
        return hidden_states + self.mlp(normed)


class TinyBert(nn.Module):
    def __init__(self, config, num_layers=2):
        super().__init__()
        self.embeddings = PatchEmbedding(config)
        self.layers = nn.ModuleList([Layer(config) for _ in range(num_layers)])
        self.llama_block = LlamaStyleBlock(config)
        self.hub = HubAttentions(config)
        self.head = ClassifierHead(config)

    def forward(self, pixels):
        hidden_states = self.embeddings(pixels)
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return self.head(self.hub(self.llama_block(hidden_states)))


def make_example():
    """Return (model, args) for one forward call."""
    return TinyBert(Config()), (torch.randn(2, 3, 8, 8),)
