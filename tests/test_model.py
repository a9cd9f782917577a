"""The one-file model: presets, RoPE, random weights, checkpoint loading, and (where transformers
is installed) logits against Hugging Face's own Llama and Qwen2 on the same weights."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from model_fixtures import hf_tensors, oracle_logits, write_checkpoint
from safetensors.torch import save_file

from attnbench.errors import UsageError
from attnbench.e2e.checkpoint import hf_state_dict, load_hf_checkpoint, read_hf_config
from attnbench.e2e.model import PRESETS, ModelArgs, apply_rope, random_model, rope_inv_freq

TINY = ModelArgs.from_name("tiny")


@pytest.mark.parametrize("name, dims, billions", [
    ("llama-7b", dict(n_layer=32, dim=4096, n_head=32, n_kv_head=32, ffn_dim=11008, vocab_size=32000), 6.74),
    ("llama-3-8b", dict(n_layer=32, dim=4096, n_head=32, n_kv_head=8, ffn_dim=14336, vocab_size=128256,
                        rope_theta=500000.0), 8.03),
    ("llama-13b", dict(n_layer=40, dim=5120, n_head=40, n_kv_head=40, ffn_dim=13824, vocab_size=32000), 13.02),
    ("qwen-14b", dict(n_layer=40, dim=5120, n_head=40, ffn_dim=13696, vocab_size=152064, qkv_bias=True), 14.17),
])
def test_presets_have_the_published_shapes(name, dims, billions):
    args = ModelArgs.from_name(name)
    for key, value in dims.items():
        assert getattr(args, key) == value, key
    assert args.head_dim == 128
    assert args.num_params / 1e9 == pytest.approx(billions, abs=0.01)


def test_unknown_model_lists_the_presets():
    with pytest.raises(UsageError) as info:
        ModelArgs.from_name("llama-70b")
    assert all(name in str(info.value) for name in PRESETS)


def test_param_count_matches_the_module():
    model = random_model(TINY, torch.float32, "cpu")
    assert sum(p.numel() for p in model.parameters()) == TINY.num_params


def test_rope_is_a_complex_rotation_of_half_split_pairs():
    # oracle: pair (x[i], x[i + d/2]) is the complex number x[i] + j x[i + d/2], turned by pos * freq[i]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 3, TINY.head_dim, generator=gen, dtype=torch.float64)
    pos = torch.tensor([0, 1, 7, 100, 255])
    half = TINY.head_dim // 2
    freq = torch.tensor([TINY.rope_theta ** (-2 * i / TINY.head_dim) for i in range(half)], dtype=torch.float64)
    z = torch.complex(x[..., :half], x[..., half:]) * torch.polar(torch.ones(5, 1, half, dtype=torch.float64),
                                                                   (pos[:, None] * freq)[:, None, :])
    expected = torch.cat([z.real, z.imag], dim=-1)
    angles = torch.outer(pos.float(), rope_inv_freq(TINY))
    got = apply_rope(x.float(), angles.cos(), angles.sin())
    assert torch.allclose(got.double(), expected, atol=1e-4)


def test_llama3_rope_scaling_keeps_high_and_scales_low_frequencies():
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    args = replace(ModelArgs.from_name("llama-3-8b"), rope_scaling=scaling)
    plain, scaled = rope_inv_freq(replace(args, rope_scaling=None)), rope_inv_freq(args)
    wavelen = 2 * math.pi / plain
    assert torch.equal(scaled[wavelen < 8192 / 4], plain[wavelen < 8192 / 4])
    assert torch.allclose(scaled[wavelen > 8192], plain[wavelen > 8192] / 8)


def test_random_weights_are_seeded_and_finite():
    a, b = random_model(TINY, torch.bfloat16, "cpu", seed=3), random_model(TINY, torch.bfloat16, "cpu", seed=3)
    c = random_model(TINY, torch.bfloat16, "cpu", seed=4)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.layers[0].attention.wqkv, c.layers[0].attention.wqkv)
    logits = oracle_logits(a, list(range(40)))
    assert torch.isfinite(logits).all()
    assert 0.3 < float(logits.std()) < 3  # scaled so activations stay O(1)


@pytest.mark.parametrize("qkv_bias, tied, shards", [(False, False, 1), (True, False, 3), (False, True, 2)])
def test_checkpoint_loads_the_same_weights(tmp_path, qkv_bias, tied, shards):
    args = replace(TINY, qkv_bias=qkv_bias, tie_embeddings=tied)
    model = random_model(args, torch.bfloat16, "cpu", seed=1)
    path = write_checkpoint(model, tmp_path / "ckpt", shards=shards)
    loaded = load_hf_checkpoint(path, torch.bfloat16, "cpu")
    assert loaded.args.qkv_bias == qkv_bias and loaded.args.tie_embeddings == tied
    tokens = list(range(5, 37))
    assert torch.equal(oracle_logits(loaded, tokens), oracle_logits(model, tokens))


def test_hf_state_dict_is_the_checkpoint_layout():
    model = random_model(TINY, torch.bfloat16, "cpu")
    ours, theirs = hf_state_dict(model), hf_tensors(model)
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


def _expect_usage_error(path, *needles):
    with pytest.raises(UsageError) as info:
        load_hf_checkpoint(path, torch.bfloat16, "cpu")
    assert all(n in str(info.value) for n in needles), str(info.value)


def test_bad_checkpoints_say_what_is_wrong(tmp_path):
    _expect_usage_error(tmp_path / "nowhere", "no such checkpoint directory")
    (tmp_path / "empty").mkdir()
    _expect_usage_error(tmp_path / "empty", "no config.json")
    good = write_checkpoint(random_model(TINY, torch.bfloat16, "cpu"), tmp_path / "good")
    config = json.loads((good / "config.json").read_text())

    def variant(name, cfg=None, tensors=None, raw=None):
        path = tmp_path / name
        path.mkdir()
        (path / "config.json").write_text(raw if raw is not None else json.dumps(cfg or config))
        save_file(tensors if tensors is not None else hf_tensors(random_model(TINY, torch.bfloat16, "cpu")),
                  str(path / "model.safetensors"))
        return path

    _expect_usage_error(variant("badjson", raw="{not json"), "not valid JSON")
    _expect_usage_error(variant("gpt2", cfg={**config, "model_type": "gpt2"}), "'gpt2' is not supported")
    _expect_usage_error(variant("nokey", cfg={k: v for k, v in config.items() if k != "hidden_size"}), "hidden_size")
    tensors = hf_tensors(random_model(TINY, torch.bfloat16, "cpu"))
    del tensors["model.layers.1.mlp.down_proj.weight"]
    _expect_usage_error(variant("missing", tensors=tensors), "model.layers.1.mlp.down_proj.weight")
    _expect_usage_error(variant("shape", cfg={**config, "intermediate_size": 300}), "shape")
    (tmp_path / "noweights").mkdir()
    (tmp_path / "noweights" / "config.json").write_text(json.dumps(config))
    _expect_usage_error(tmp_path / "noweights", "no *.safetensors")
    corrupt = variant("corrupt")
    (corrupt / "model.safetensors").write_bytes(b"\x00" * 16)
    _expect_usage_error(corrupt, "cannot read")


def test_read_hf_config_understands_transformers_5_rope_parameters(tmp_path):
    model = random_model(TINY, torch.bfloat16, "cpu")
    path = write_checkpoint(model, tmp_path / "v5")
    cfg = json.loads((path / "config.json").read_text())
    del cfg["rope_theta"]
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": 123456.0}
    (path / "config.json").write_text(json.dumps(cfg))
    assert read_hf_config(path).rope_theta == 123456.0


@pytest.mark.parametrize("qkv_bias", [False, True], ids=["llama", "qwen2"])
def test_logits_match_hugging_face_transformers(qkv_bias):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (it is on the GPU machine)")
    args = replace(TINY, qkv_bias=qkv_bias)
    model = random_model(args, torch.float32, "cpu", seed=2)
    kwargs = dict(vocab_size=args.vocab_size, hidden_size=args.dim, intermediate_size=args.ffn_dim,
                  num_hidden_layers=args.n_layer, num_attention_heads=args.n_head, num_key_value_heads=args.n_kv_head,
                  rms_norm_eps=args.norm_eps, max_position_embeddings=args.max_positions, tie_word_embeddings=False)
    assert args.rope_theta == 10000.0  # the default of both configs
    if qkv_bias:
        hf = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**kwargs))
    else:
        hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**kwargs))
    missing, unexpected = hf.load_state_dict(hf_state_dict(model), strict=False)
    assert not unexpected and all("rotary" in k for k in missing)
    tokens = list(range(3, 40))
    with torch.inference_mode():
        expected = hf(torch.tensor([tokens])).logits[0].float()
    assert torch.allclose(oracle_logits(model, tokens), expected, atol=2e-3, rtol=1e-3)


def test_a_layer_hands_on_its_output_and_the_stream_that_the_next_norm_adds():
    """The fused residual (a layer returns its MLP output beside the stream, the next norm adds them)
    computes what the textbook layer does: h = x + wo(attn(norm(x))), then h + mlp(norm(h))."""
    model = random_model(TINY, torch.float32, "cpu", seed=3)
    layer = model.layers[0]
    x = torch.randn(5, TINY.dim)
    cos, sin = model.rope_cos[:5], model.rope_sin[:5]
    attn = lambda _, q, k, v: q * 0.5 + torch.repeat_interleave(v, TINY.n_head // TINY.n_kv_head, dim=1)  # noqa: E731
    out, stream = layer(x, None, cos, sin, attn)

    def norm(t, weight):
        return weight * t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + TINY.norm_eps)
    q, k, v = layer.attention.qkv(norm(x, layer.attention_norm.weight), cos, sin)
    h = x + attn(0, q, k, v).flatten(1) @ layer.attention.wo.T
    mlp_in = norm(h, layer.ffn_norm.weight) @ layer.feed_forward.w13.T
    gate, up = mlp_in.chunk(2, dim=-1)
    expected = h + (torch.nn.functional.silu(gate) * up) @ layer.feed_forward.w2.T
    assert torch.allclose(stream, h, atol=1e-5) and torch.allclose(out + stream, expected, atol=1e-5)
