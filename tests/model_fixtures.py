"""Oracles and fixtures the model and e2e tests share, written without attnbench's engine code.

`dense_attention` is the model's attention over whole sequences with no cache, no pages and no
metadata: the naive float64 oracle of conftest over each sequence. `write_checkpoint` writes a
Hugging Face-layout checkpoint with its own name mapping (q/k/v and gate/up split apart), so a
loader that agrees with it is loading the layout Hugging Face uses.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from conftest import naive_attention
from safetensors.torch import save_file

from attnbench.e2e.model import Transformer


def dense_attention(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention of one whole sequence (q, k, v: [tokens, heads, dim])."""
    out = naive_attention(q, [k], [v], [q.shape[0]], causal=True, scale=q.shape[-1] ** -0.5)
    return out.to(q.device, q.dtype)


@torch.inference_mode()
def oracle_logits(model: Transformer, tokens: list[int]) -> torch.Tensor:
    """Logits at every position of one sequence, recomputed from scratch: [tokens, vocab]."""
    ids = torch.tensor(tokens, device=model.tok_embeddings.device)
    return model(ids, torch.arange(len(tokens), device=ids.device), dense_attention).float()


def hf_tensors(model: Transformer) -> dict[str, torch.Tensor]:
    a = model.args
    q, kv = a.n_head * a.head_dim, a.n_kv_head * a.head_dim
    out = {"model.embed_tokens.weight": model.tok_embeddings, "model.norm.weight": model.norm.weight}
    if not a.tie_embeddings:
        out["lm_head.weight"] = model.output
    for i, layer in enumerate(model.layers):
        p = f"model.layers.{i}."
        att, ffn = layer.attention, layer.feed_forward
        for name, t in zip(("q_proj", "k_proj", "v_proj"), att.wqkv.split([q, kv, kv])):
            out[f"{p}self_attn.{name}.weight"] = t
        if att.bqkv is not None:
            for name, t in zip(("q_proj", "k_proj", "v_proj"), att.bqkv.split([q, kv, kv])):
                out[f"{p}self_attn.{name}.bias"] = t
        out[f"{p}self_attn.o_proj.weight"] = att.wo
        gate, up = ffn.w13.chunk(2)
        out[f"{p}mlp.gate_proj.weight"], out[f"{p}mlp.up_proj.weight"] = gate, up
        out[f"{p}mlp.down_proj.weight"] = ffn.w2
        out[f"{p}input_layernorm.weight"] = layer.attention_norm.weight
        out[f"{p}post_attention_layernorm.weight"] = layer.ffn_norm.weight
    return {k: v.detach().contiguous().cpu() for k, v in out.items()}


def hf_config(model: Transformer) -> dict:
    a = model.args
    return {"model_type": "qwen2" if a.qkv_bias else "llama", "hidden_size": a.dim, "num_hidden_layers": a.n_layer,
            "num_attention_heads": a.n_head, "num_key_value_heads": a.n_kv_head, "intermediate_size": a.ffn_dim,
            "vocab_size": a.vocab_size, "rms_norm_eps": a.norm_eps, "rope_theta": a.rope_theta,
            "max_position_embeddings": a.max_positions, "tie_word_embeddings": a.tie_embeddings,
            "torch_dtype": "bfloat16"}


def write_checkpoint(model: Transformer, path: Path, shards: int = 1) -> Path:
    """config.json + model-0000i-of-0000n.safetensors, tensors dealt round-robin over the shards."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(hf_config(model)))
    tensors = list(hf_tensors(model).items())
    for i in range(shards):
        save_file(dict(tensors[i::shards]), str(path / f"model-{i + 1:05d}-of-{shards:05d}.safetensors"))
    return path
