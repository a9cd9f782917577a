"""Reading a local Hugging Face Llama or Qwen2 checkpoint into attnbench's model.

config.json becomes ModelArgs (bad values are refused naming the key), *.safetensors become the
weights, mapped by name; nothing is ever downloaded. `hf_state_dict` goes the other way, so tests
can check the model's logits against transformers' on the same weights.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch

from attnbench.e2e.model import ModelArgs, Transformer
from attnbench.errors import UsageError

HF_MODEL_TYPES = ("llama", "qwen2")
_HF_LAYER = {  # our parameter -> the Hugging Face tensors concatenated (dim 0) into it
    "attention.wqkv": ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
    "attention.bqkv": ("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"),
    "attention.wo": ("self_attn.o_proj.weight",),
    "feed_forward.w13": ("mlp.gate_proj.weight", "mlp.up_proj.weight"),
    "feed_forward.w2": ("mlp.down_proj.weight",),
    "attention_norm.weight": ("input_layernorm.weight",),
    "ffn_norm.weight": ("post_attention_layernorm.weight",),
}


def hf_names(args: ModelArgs) -> dict[str, tuple[str, ...]]:
    names = {"tok_embeddings": ("model.embed_tokens.weight",), "norm.weight": ("model.norm.weight",)}
    if not args.tie_embeddings:
        names["output"] = ("lm_head.weight",)
    for i in range(args.n_layer):
        for ours, theirs in _HF_LAYER.items():
            if ours != "attention.bqkv" or args.qkv_bias:
                names[f"layers.{i}.{ours}"] = tuple(f"model.layers.{i}.{t}" for t in theirs)
    return names


def hf_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """Our weights under Hugging Face names (views, no copies): to load into transformers."""
    a, params, out = model.args, dict(model.named_parameters()), {}
    sizes = {"attention.wqkv": [a.n_head * a.head_dim, a.n_kv_head * a.head_dim, a.n_kv_head * a.head_dim],
             "feed_forward.w13": [a.ffn_dim, a.ffn_dim]}
    sizes["attention.bqkv"] = sizes["attention.wqkv"]
    for ours, theirs in hf_names(a).items():
        kind = ours.split(".", 2)[-1]
        parts = params[ours].split(sizes[kind]) if len(theirs) > 1 else [params[ours]]
        out.update(zip(theirs, parts))
    return out


def args_from_hf_config(cfg: dict, name: str) -> ModelArgs:
    model_type = cfg.get("model_type")
    if model_type not in HF_MODEL_TYPES:
        raise UsageError(f"--model: {name}: model_type {model_type!r} is not supported "
                         f"(supported: {', '.join(HF_MODEL_TYPES)})")
    if cfg.get("attention_bias") or cfg.get("mlp_bias") or cfg.get("use_sliding_window"):
        raise UsageError(f"--model: {name}: attention_bias/mlp_bias/sliding windows are not supported")
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}  # transformers 5 / 4 spelling
    if rope.get("rope_type", rope.get("type", "default")) not in ("default", "linear", "llama3"):
        raise UsageError(f"--model: {name}: rope scaling {rope} is not supported (default, linear, llama3)")
    try:
        heads = cfg["num_attention_heads"]
        return ModelArgs(
            name=name, n_layer=cfg["num_hidden_layers"], dim=cfg["hidden_size"], n_head=heads,
            n_kv_head=cfg.get("num_key_value_heads") or heads, ffn_dim=cfg["intermediate_size"],
            vocab_size=cfg["vocab_size"], head_dim=cfg.get("head_dim") or 0,
            rope_theta=float(cfg.get("rope_theta", rope.get("rope_theta", 10000.0))),
            rope_scaling=rope or None, norm_eps=cfg.get("rms_norm_eps", 1e-6),
            qkv_bias=model_type == "qwen2", tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            max_positions=cfg.get("max_position_embeddings", 4096))
    except KeyError as exc:
        raise UsageError(f"--model: {name}/config.json lacks {exc.args[0]!r}") from None


def read_hf_config(path: Path) -> ModelArgs:
    """Check a checkpoint directory and read its config.json, without touching the weights."""
    if not path.exists():
        raise UsageError(f"--model: no such checkpoint directory: {path}")
    if not path.is_dir():
        raise UsageError(f"--model: {path} is not a directory (expected config.json + *.safetensors)")
    config = path / "config.json"
    if not config.is_file():
        raise UsageError(f"--model: {path} has no config.json (expected a Hugging Face checkpoint)")
    if not sorted(path.glob("*.safetensors")):
        raise UsageError(f"--model: {path} has no *.safetensors weights")
    try:
        cfg = json.loads(config.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"--model: {config} is not valid JSON ({exc})") from None
    if not isinstance(cfg, dict):
        raise UsageError(f"--model: {config} is not a JSON object")
    return args_from_hf_config(cfg, str(path))


@torch.no_grad()
def load_hf_checkpoint(path: Path, dtype: torch.dtype, device, args: ModelArgs | None = None) -> Transformer:
    """A Llama/Qwen2 checkpoint directory -> Transformer with its weights, cast to `dtype`."""
    from safetensors import SafetensorError, safe_open

    args = args or read_hf_config(path)
    where: dict[str, Path] = {}
    for file in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as f:
                where.update(dict.fromkeys(f.keys(), file))
        except (SafetensorError, OSError) as exc:
            raise UsageError(f"--model: cannot read {file}: {exc}") from None
    if args.tie_embeddings is False and "lm_head.weight" not in where and "model.embed_tokens.weight" in where:
        args = replace(args, tie_embeddings=True)  # some checkpoints tie without saying so
    wanted = hf_names(args)
    missing = [t for theirs in wanted.values() for t in theirs if t not in where]
    if missing:
        raise UsageError(f"--model: {path} lacks tensor {missing[0]!r}")
    model = Transformer(args, dtype, device)
    params = dict(model.named_parameters())
    # one shard at a time: a parameter is filled once all of its parts have been read
    needed = {t for theirs in wanted.values() for t in theirs}
    loaded: dict[str, torch.Tensor] = {}
    for file in dict.fromkeys(where[t] for t in sorted(needed)):
        with safe_open(str(file), framework="pt", device=str(device)) as f:
            loaded.update((name, f.get_tensor(name)) for name in f.keys() if name in needed)
        for ours, theirs in list(wanted.items()):
            if all(t in loaded for t in theirs):
                parts = [loaded.pop(t) for t in theirs]
                tensor = torch.cat(parts) if len(parts) > 1 else parts[0]
                if tensor.shape != params[ours].shape:
                    raise UsageError(f"--model: {path}: {theirs[0]} has shape {tuple(parts[0].shape)}, "
                                     f"config.json implies {tuple(params[ours].shape)} for {ours}")
                params[ours].copy_(tensor)
                del wanted[ours]
    return model
