"""Reading a local Hugging Face Llama or Qwen2 checkpoint into attnbench's model.

config.json becomes ModelArgs, *.safetensors become the weights, mapped by name; nothing is ever
downloaded. Every config value is type- and range-checked before it is used (a checkpoint is
input like any flag): a bad one is refused with the file and the key named. `hf_state_dict` goes
the other way, so tests can check the model's logits against transformers' on the same weights.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import torch

from attnbench.e2e.model import ModelArgs, Transformer
from attnbench.e2e.parallel import SINGLE, TensorParallel, rank_args, shard
from attnbench.errors import UsageError
from attnbench.kernels.workload import MAX_HEAD_DIM, MAX_HEADS

HF_MODEL_TYPES = ("llama", "qwen2")
ROPE_TYPES = ("default", "linear", "llama3")
# integer keys of config.json -> their range: far past any released model, short of absurd
INT_KEYS = {"num_hidden_layers": (1, 1024), "hidden_size": (1, 1 << 17), "num_attention_heads": (1, MAX_HEADS),
            "num_key_value_heads": (1, MAX_HEADS), "intermediate_size": (1, 1 << 20), "vocab_size": (1, 1 << 24),
            "head_dim": (8, MAX_HEAD_DIM), "max_position_embeddings": (1, 1 << 24),
            "original_max_position_embeddings": (1, 1 << 24)}
_REQUIRED = object()
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


def _value(cfg: dict, key: str, where: str, ok, expected: str, default=_REQUIRED):
    """cfg[key] if `ok` says it is valid; a missing key or null takes `default` (refused if none)."""
    value = cfg.get(key)
    if value is None:
        if default is _REQUIRED:
            raise UsageError(f"--model: {where} lacks {key!r}")
        return default
    if not ok(value):
        raise UsageError(f"--model: {where}: {key}: expected {expected}, got {value!r}")
    return value


def _int(cfg: dict, key: str, where: str, default=_REQUIRED) -> int:
    low, high = INT_KEYS[key]
    return _value(cfg, key, where, lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high,
                  f"an integer between {low} and {high}", default)


def _positive(cfg: dict, key: str, where: str, default=_REQUIRED, below: float = math.inf) -> float:
    def ok(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < below and math.isfinite(v)

    expected = "a positive finite number" + (f" below {below:g}" if below < math.inf else "")
    value = _value(cfg, key, where, ok, expected, default)
    return value if value is None else float(value)


def _flag(cfg: dict, key: str, where: str) -> bool:
    return _value(cfg, key, where, lambda v: isinstance(v, bool), "true or false", False)


def _rope(cfg: dict, where: str) -> dict:
    """rope_parameters (transformers 5) or rope_scaling (4), checked for the types model.py applies."""
    key = "rope_parameters" if cfg.get("rope_parameters") is not None else "rope_scaling"
    rope = _value(cfg, key, where, lambda v: isinstance(v, dict), "an object or null", {})
    inner = f"{where}: {key}"
    kind = rope.get("rope_type", rope.get("type", "default"))
    if not isinstance(kind, str) or kind not in ROPE_TYPES:
        raise UsageError(f"--model: {inner}: rope type {kind!r} is not supported ({', '.join(ROPE_TYPES)})")
    if kind in ("linear", "llama3"):
        _positive(rope, "factor", inner)
    if kind == "llama3":
        low, high = _positive(rope, "low_freq_factor", inner), _positive(rope, "high_freq_factor", inner)
        if high <= low:
            raise UsageError(f"--model: {inner}: high_freq_factor ({high}) must be above low_freq_factor ({low})")
        _int(rope, "original_max_position_embeddings", inner)
    _positive(rope, "rope_theta", inner, default=None)
    return rope


def args_from_hf_config(cfg: dict, name: str, where: str | None = None) -> ModelArgs:
    """ModelArgs from a config.json's values, each checked first; `where` names the file in errors."""
    where = where or f"{name}/config.json"
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or model_type not in HF_MODEL_TYPES:
        raise UsageError(f"--model: {where}: model_type {model_type!r} is not supported "
                         f"(supported: {', '.join(HF_MODEL_TYPES)})")
    if any(_flag(cfg, key, where) for key in ("attention_bias", "mlp_bias", "use_sliding_window")):
        raise UsageError(f"--model: {where}: attention_bias/mlp_bias/sliding windows are not supported")
    rope = _rope(cfg, where)
    layers, hidden, heads = (_int(cfg, k, where) for k in ("num_hidden_layers", "hidden_size", "num_attention_heads"))
    kv_heads = _int(cfg, "num_key_value_heads", where, default=heads)
    if heads % kv_heads:
        raise UsageError(f"--model: {where}: num_attention_heads ({heads}) must be divisible by "
                         f"num_key_value_heads ({kv_heads})")
    head_dim = _int(cfg, "head_dim", where, default=0)
    if not head_dim and hidden % heads:
        raise UsageError(f"--model: {where}: hidden_size ({hidden}) must be divisible by num_attention_heads "
                         f"({heads}) when there is no head_dim")
    if (head_dim or hidden // heads) % 8:
        raise UsageError(f"--model: {where}: the head dim ({head_dim or hidden // heads}, head_dim or hidden_size / "
                         "num_attention_heads) must be a multiple of 8")
    theta = _positive(cfg, "rope_theta", where, default=rope.get("rope_theta", 10000.0))
    return ModelArgs(
        name=name, n_layer=layers, dim=hidden, n_head=heads, n_kv_head=kv_heads,
        ffn_dim=_int(cfg, "intermediate_size", where), vocab_size=_int(cfg, "vocab_size", where), head_dim=head_dim,
        rope_theta=theta, rope_scaling=rope or None, norm_eps=_positive(cfg, "rms_norm_eps", where, 1e-6, below=1.0),
        qkv_bias=model_type == "qwen2", tie_embeddings=_flag(cfg, "tie_word_embeddings", where),
        max_positions=_int(cfg, "max_position_embeddings", where, default=4096))


def _no_duplicate_keys(pairs: list) -> dict:
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(f"the key {key!r} appears twice")
        seen.add(key)
    return dict(pairs)


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
        text = config.read_bytes().decode("utf-8")
    except OSError as exc:
        raise UsageError(f"--model: cannot read {config} ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise UsageError(f"--model: {config} is not UTF-8 text") from None
    try:
        cfg = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise UsageError(f"--model: {config} is not valid JSON ({exc})") from None
    if not isinstance(cfg, dict):
        raise UsageError(f"--model: {config} is not a JSON object")
    return args_from_hf_config(cfg, str(path), str(config))


@torch.no_grad()
def load_hf_checkpoint(path: Path, dtype: torch.dtype, device, args: ModelArgs | None = None,
                       tp: TensorParallel = SINGLE) -> Transformer:
    """A Llama/Qwen2 checkpoint directory -> Transformer with its weights, cast to `dtype`; with
    tensor parallelism, rank tp.rank's shard of it (whole tensors read, then sliced: parallel.shard)."""
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
    model = Transformer(rank_args(args, tp.size), dtype, device)
    params = dict(model.named_parameters())
    shapes = {name: p.shape for name, p in Transformer(args, dtype, "meta").named_parameters()}
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
                if tensor.shape != shapes[ours]:
                    raise UsageError(f"--model: {path}: {theirs[0]} has shape {tuple(parts[0].shape)}, "
                                     f"config.json implies {tuple(shapes[ours])} for {ours}")
                params[ours].copy_(shard(ours, tensor, args, tp))
                del wanted[ours]
    return model
