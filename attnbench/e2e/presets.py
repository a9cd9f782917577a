"""The e2e defaults as plain data: the model presets and the seed's request grid.

Why a module of its own: `attnbench e2e --help` names the presets and shows the grid's defaults,
and the help must answer without importing torch. model.py and runner.py take these from here.
"""

from __future__ import annotations

# The seed's model (llama-7b) and the shapes around it. qwen-14b is Qwen-14B-Chat's dimensions in
# this Llama-family block (its MLP width is config intermediate_size 27392 / 2).
PRESETS: dict[str, dict] = {
    "llama-7b": dict(n_layer=32, dim=4096, n_head=32, n_kv_head=32, ffn_dim=11008, vocab_size=32000),
    "llama-3-8b": dict(n_layer=32, dim=4096, n_head=32, n_kv_head=8, ffn_dim=14336, vocab_size=128256,
                       rope_theta=500000.0, max_positions=8192),
    "llama-13b": dict(n_layer=40, dim=5120, n_head=40, n_kv_head=40, ffn_dim=13824, vocab_size=32000),
    "qwen-14b": dict(n_layer=40, dim=5120, n_head=40, n_kv_head=40, ffn_dim=13696, vocab_size=152064,
                     norm_eps=1e-6, qkv_bias=True, max_positions=8192),
    # CPU tests and GPU smoke tests: head dim 64 is in the FA2 JIT cache the device pack carries;
    # 4/2 heads split over 2 tensor-parallel ranks
    "tiny": dict(n_layer=2, dim=256, n_head=4, n_kv_head=2, ffn_dim=512, vocab_size=1024, qkv_bias=True),
    # 70B class, GQA 64/8: they need tensor parallelism (--tp 2 on H200s). Values from the Hugging Face
    # config.json of meta-llama/Llama-2-70b-hf, meta-llama/Meta-Llama-3-70B and Qwen/Qwen2-72B (80 layers
    # each); Qwen2 has q/k/v biases, as qwen-14b.
    "llama-2-70b": dict(n_layer=80, dim=8192, n_head=64, n_kv_head=8, ffn_dim=28672, vocab_size=32000),
    "llama-3-70b": dict(n_layer=80, dim=8192, n_head=64, n_kv_head=8, ffn_dim=28672, vocab_size=128256,
                        rope_theta=500000.0, max_positions=8192),
    "qwen-72b": dict(n_layer=80, dim=8192, n_head=64, n_kv_head=8, ffn_dim=29568, vocab_size=152064,
                     rope_theta=1000000.0, norm_eps=1e-6, qkv_bias=True, max_positions=32768),
}

# The seed's table: input/output lengths zipped, times every batch size (the flags' text defaults)
SEED_INPUT_LENS, SEED_OUTPUT_LENS, SEED_BATCH_SIZES = "32,512", "128,32", "1,2,4,8,16,32"
