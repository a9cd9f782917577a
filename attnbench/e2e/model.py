"""A Llama-family decoder in one file, gpt-fast style: presets as data (presets.py), small free functions.

Why it exists: unified vs split is decided by request latency, so the e2e benchmark needs the
real step around the attention kernel: the GEMMs, norms, RoPE and LM head a serving engine runs.
The kernel itself is not here. Each layer hands its (q, k, v) to `attn(layer_id, q, k, v)`, a
callable the engine supplies (paged KV cache + attnbench backend + strategy), so between two
compared runs only that callable changes.

Weights are random by default, made on the device from a fixed seed and scaled 1/sqrt(fan_in)
so that every layer's activations stay O(1); or checkpoint.py reads them from a local Hugging
Face Llama or Qwen2 checkpoint directory (config.json + *.safetensors). Nothing is downloaded.
Tokens are laid out flat ([num_tokens, ...], sequences back to back), as varlen kernels want.
Tensor parallelism stays out of this file, as gpt-fast keeps it in tp.py: a rank builds this model
from its share of the shape (parallel.rank_args) and parallel.py adds the all-reduces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from attnbench.e2e.elementwise import choose_projections, fused, projection, triton_kernels
from attnbench.e2e.presets import PRESETS
from attnbench.errors import UsageError

AttnFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def applies_rope(attn: AttnFn) -> bool:
    """Whether the attention call turns q and k itself (attention.PagedAttention with a "-rope"
    kv_write): the model then hands them over unturned, with rope=(cos, sin)."""
    return getattr(attn, "applies_rope", False)


@dataclass(frozen=True)
class ModelArgs:
    name: str
    n_layer: int
    dim: int
    n_head: int
    n_kv_head: int
    ffn_dim: int
    vocab_size: int
    head_dim: int = 0  # 0: dim // n_head
    rope_theta: float = 10000.0
    rope_scaling: dict | None = field(default=None, compare=False)
    norm_eps: float = 1e-5
    qkv_bias: bool = False
    tie_embeddings: bool = False
    max_positions: int = 4096

    def __post_init__(self) -> None:
        if not self.head_dim:
            object.__setattr__(self, "head_dim", self.dim // self.n_head)

    @classmethod
    def from_name(cls, name: str) -> ModelArgs:
        if name not in PRESETS:
            raise UsageError(f"--model: unknown model {name!r}; presets: {', '.join(PRESETS)} "
                             "(or a local Hugging Face checkpoint directory)")
        return cls(name=name, **PRESETS[name])

    @property
    def num_params(self) -> int:
        qkv = self.dim * (self.n_head + 2 * self.n_kv_head) * self.head_dim
        qkv_bias = (self.n_head + 2 * self.n_kv_head) * self.head_dim if self.qkv_bias else 0
        layer = qkv + qkv_bias + self.n_head * self.head_dim * self.dim + 3 * self.dim * self.ffn_dim + 2 * self.dim
        heads = 1 if self.tie_embeddings else 2
        return self.n_layer * layer + heads * self.vocab_size * self.dim + self.dim


def rope_inv_freq(args: ModelArgs) -> torch.Tensor:
    """Rotary frequencies, with Llama-3 or linear scaling when the checkpoint asks for it."""
    inv = 1.0 / args.rope_theta ** (torch.arange(0, args.head_dim, 2, dtype=torch.float32) / args.head_dim)
    scaling = args.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "linear":
        return inv / scaling["factor"]
    if kind == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        medium = (wavelen >= old / high) & (wavelen <= old / low)
        return torch.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)
    return inv


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE (the Hugging Face layout, so checkpoints load without permuting q/k)."""
    x1, x2 = x.float().chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


@fused
def rope_qk(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin)


@fused
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    return weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


@fused
def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float):
    """The residual add and the RMSNorm after it in one kernel (vLLM's fused_add_rms_norm):
    (norm(x + residual), x + residual). The add is in the model's dtype, as an unfused add is."""
    h = x + residual
    return rms_norm.fn(h, weight, eps), h


@fused
def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def _param(*shape: int, dtype, device) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, dtype, device):
        super().__init__()
        self.eps, self.weight = eps, _param(dim, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """norm(x); with a residual, (norm(x + residual), x + residual) from one fused kernel."""
        if residual is None:
            return rms_norm(x, self.weight, self.eps)
        return add_rms_norm(x, residual, self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, layer_id: int, dtype, device):
        super().__init__()
        self.layer_id, self.n_head, self.n_kv_head, self.head_dim = layer_id, args.n_head, args.n_kv_head, args.head_dim
        qkv = (args.n_head + 2 * args.n_kv_head) * args.head_dim
        self.wqkv = _param(qkv, args.dim, dtype=dtype, device=device)
        self.bqkv = _param(qkv, dtype=dtype, device=device) if args.qkv_bias else None
        self.wo = _param(args.dim, args.n_head * args.head_dim, dtype=dtype, device=device)
        self.linear = F.linear  # Transformer.use_projection sets another

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotate: bool = True):
        """The attention call's inputs, [tokens, heads, head_dim] each: q and k rotated, or with
        rotate=False as the GEMM left them (an attention call that applies RoPE itself turns them)."""
        q_size, kv_size = self.n_head * self.head_dim, self.n_kv_head * self.head_dim
        q, k, v = self.linear(x, self.wqkv, self.bqkv).split([q_size, kv_size, kv_size], dim=-1)
        q, k = q.view(-1, self.n_head, self.head_dim), k.view(-1, self.n_kv_head, self.head_dim)
        if rotate:
            q, k = rope_qk(q, k, cos, sin)
        return q, k, v.view(-1, self.n_kv_head, self.head_dim)

    def forward(self, out: torch.Tensor) -> torch.Tensor:
        """The output projection of the attention call's output. It is this module's forward (and
        qkv a method) so that a forward hook, parallel.py's all-reduce after the row-parallel wo,
        runs in every path: eager, and piecewise graphs, where the call runs between two graphs."""
        return self.linear(out.view(out.shape[0], -1), self.wo)


class FeedForward(nn.Module):
    """SwiGLU with gate and up fused into one GEMM (w13), as serving engines do."""

    def __init__(self, args: ModelArgs, dtype, device):
        super().__init__()
        self.w13 = _param(2 * args.ffn_dim, args.dim, dtype=dtype, device=device)
        self.w2 = _param(args.dim, args.ffn_dim, dtype=dtype, device=device)
        self.linear = F.linear  # Transformer.use_projection sets another

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(silu_and_mul(self.linear(x, self.w13)), self.w2)


class Block(nn.Module):
    def __init__(self, args: ModelArgs, layer_id: int, dtype, device):
        super().__init__()
        self.attention_norm = RMSNorm(args.dim, args.norm_eps, dtype, device)
        self.attention = Attention(args, layer_id, dtype, device)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps, dtype, device)
        self.feed_forward = FeedForward(args, dtype, device)

    # The residual stream travels beside each layer's output, as in vLLM: a layer returns its MLP
    # output and the stream before it, and the next norm (the next layer's, or the head's) adds
    # them in its own kernel, so no residual add is a kernel of its own.

    def pre_attention(self, x: torch.Tensor, residual: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor,
                      rotate: bool = True):
        """x: the previous layer's MLP output (layer 0: the embeddings, residual None); residual:
        the stream it adds to. ((q, k, v), the stream x + residual); rotate: Attention.qkv's."""
        if residual is None:
            h, normed = x, self.attention_norm(x)
        else:
            normed, h = self.attention_norm(x, residual)
        return self.attention.qkv(normed, cos, sin, rotate), h

    def post_attention(self, h: torch.Tensor, out: torch.Tensor):
        """h: the stream; out: the attention call's output. (the MLP output, the stream it adds to)."""
        normed, h = self.ffn_norm(self.attention(out), h)
        return self.feed_forward(normed), h

    def forward(self, x, residual, cos, sin, attn: AttnFn):
        turns = applies_rope(attn)  # the attention call turns q and k as it stores k (one kernel on CUDA)
        (q, k, v), h = self.pre_attention(x, residual, cos, sin, rotate=not turns)
        rope = {"rope": (cos, sin)} if turns else {}
        return self.post_attention(h, attn(self.attention.layer_id, q, k, v, **rope))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs, dtype: torch.dtype, device: torch.device | str):
        super().__init__()
        self.args = args
        self.tok_embeddings = _param(args.vocab_size, args.dim, dtype=dtype, device=device)
        self.layers = nn.ModuleList(Block(args, i, dtype, device) for i in range(args.n_layer))
        self.norm = RMSNorm(args.dim, args.norm_eps, dtype, device)
        self.output = self.tok_embeddings if args.tie_embeddings else _param(
            args.vocab_size, args.dim, dtype=dtype, device=device)
        self.setup_rope(args.max_positions)
        self.linear, self.projection, self.projection_choices = F.linear, "linear", {}

    def use_projection(self, kind: str) -> Transformer:
        """Issue every projection (qkv, wo, w13, w2, the LM head) by elementwise.projection(kind).
        "auto" first times each weight shape's one-token call both ways on this GPU
        (elementwise.choose_projections; a second or so) and keeps what it chose in
        `projection_choices` ({(N, K): ShapeChoice}; empty for the other kinds)."""
        device = self.tok_embeddings.device
        choices = {}
        if kind == "auto":
            choices = choose_projections(self.projection_weights(), triton_kernels("projection auto", device).gemv)
        call = projection(kind, device, {shape: c.choice for shape, c in choices.items()})
        for module in (self, *(layer.attention for layer in self.layers), *(layer.feed_forward for layer in self.layers)):
            module.linear = call
        self.projection, self.projection_choices = kind, choices
        return self

    def projection_weights(self) -> dict[tuple[int, int], list[torch.Tensor]]:
        """Every projection weight of the model, by shape (N, K)."""
        weights: dict[tuple[int, int], list[torch.Tensor]] = {}
        for layer in self.layers:
            for w in (layer.attention.wqkv, layer.attention.wo, layer.feed_forward.w13, layer.feed_forward.w2):
                weights.setdefault(tuple(w.shape), []).append(w)
        weights.setdefault(tuple(self.output.shape), []).append(self.output)
        return weights

    def setup_rope(self, max_len: int) -> None:
        """cos/sin tables for positions 0 .. max_len - 1, float32, on the model's device."""
        device = self.tok_embeddings.device
        freqs = torch.outer(torch.arange(max_len, dtype=torch.float32), rope_inv_freq(self.args)).to(device)
        self.rope_cos, self.rope_sin = freqs.cos(), freqs.sin()

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttnFn,
                logits_indices: torch.Tensor | None = None) -> torch.Tensor:
        """Logits for the tokens at `logits_indices` (all tokens when None)."""
        x, cos, sin = self.embed(input_ids, positions)
        residual = None
        for layer in self.layers:
            x, residual = layer(x, residual, cos, sin, attn)
        return self.head(x, residual, logits_indices)

    # forward's parts, which piecewise CUDA graphs (piecewise.py) capture between the attention calls

    def embed(self, input_ids: torch.Tensor, positions: torch.Tensor):
        """The tokens' embeddings and their positions' RoPE cos/sin."""
        return F.embedding(input_ids, self.tok_embeddings), self.rope_cos[positions], self.rope_sin[positions]

    def head(self, x: torch.Tensor, residual: torch.Tensor, logits_indices: torch.Tensor | None = None) -> torch.Tensor:
        """The logits of the last layer's output x + its stream (rows logits_indices, all when None)."""
        if logits_indices is not None:
            x, residual = x[logits_indices], residual[logits_indices]
        return self.linear(self.norm(x, residual)[0], self.output)


def fill_random_(name: str, p: torch.Tensor, gen: torch.Generator) -> None:
    """One parameter's random values, by its name; parallel.py draws whole tensors with it too."""
    if name.endswith("norm.weight"):
        p.fill_(1.0)
    elif p.dim() == 1:  # qkv bias: small, as trained ones are
        p.normal_(0.0, 0.02, generator=gen)
    elif name == "tok_embeddings":
        p.normal_(0.0, 1.0, generator=gen)
    else:
        p.normal_(0.0, p.shape[1] ** -0.5, generator=gen)


@torch.no_grad()
def init_random_(model: Transformer, seed: int = 0) -> Transformer:
    """Random weights from `seed`, drawn on the model's device in parameter order."""
    gen = torch.Generator(device=model.tok_embeddings.device).manual_seed(seed)
    for name, p in model.named_parameters():
        fill_random_(name, p, gen)
    return model


def random_model(args: ModelArgs, dtype: torch.dtype, device, seed: int = 0) -> Transformer:
    return init_random_(Transformer(args, dtype, device), seed)
