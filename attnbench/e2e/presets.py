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

# The defaults of the flags a device scales (E2EArgs leaves them None: not given). On a GPU, the
# seed's table: input/output lengths zipped, times every batch size, on llama-7b. No warm-up: the
# untimed check run already ran each row's exact requests through the same engine (graphs
# captured, kernels compiled, memory pooled); a first measured run still settling widens the
# interval, and the rule measures more (e2e/stopping.py). vllm bench latency's 10 warm-ups and 30
# runs stay flags: --warmup 10 --iters 30 --precision 0.
# On the CPU the run is a pipeline demo (reference attention, perf_counter), scaled to finish in
# well under a minute on a small machine: tiny, one short point at two batch sizes, a fixed count.
GPU_DEFAULTS: dict[str, object] = dict(model="llama-7b", input_len=[32, 512], output_len=[128, 32],
                                       batch_size=[1, 2, 4, 8, 16, 32], warmup=0, iters=30)
CPU_DEFAULTS: dict[str, object] = dict(model="tiny", input_len=[16], output_len=[4], batch_size=[1, 2],
                                       warmup=0, iters=3)
MIN_ITERS = 6  # the fewest runs whose range is a 95 % interval of the median (e2e/stopping.py)
# --precision: the half-width of the p50's 95 % interval within 2 % of it. On a power-capped GPU a
# request's latency moves by about that much from run to run, and a tighter default sends most rows
# to --iters (docs/measurements/h200/e2e.md); pass --precision 0.01 to resolve 1 % at that cost.
PRECISION = 0.02


def default_text(flag: str) -> str:
    """A scaled flag's defaults for its help: "32,512 on a GPU, 16 on the CPU"."""
    said = [",".join(map(str, v)) if isinstance(v, list) else str(v)
            for v in (GPU_DEFAULTS[flag], CPU_DEFAULTS[flag])]
    return f"default {said[0]}" if said[0] == said[1] else f"default {said[0]} on a GPU, {said[1]} on the CPU"
