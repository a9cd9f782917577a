"""llama-7b at batch 1 against two yardsticks, both measured in this run on this GPU.

1. The weight-read floor. A batch-1 decode step must read every weight once, so it cannot take
   less than bf16 weight bytes / the device's copy bandwidth (measured here: read + write bytes of
   a 2 GiB device-to-device copy, CUDA events). Goal (issue 24): attnbench's decode step under
   CUDA graphs within 1.3x the floor.
   The step's projections alone (its GEMVs in one graph, four ways of issuing them: cuBLAS as the
   model does, cuBLASLt, torch.mv, and fused_ops.gemv's one-pass Triton GEMV), and each projection
   shape alone, show how much of the step is weight reads, how much everything else, and which
   way reads each shape's weights fastest (e2e_floor_parts.py).
   Under `--cudagraph full` (issue 11) every step replays a graph: the batch-1 prefill step of
   --input-len tokens against the batch-1 decode step of the same engine (goal: within 1.5x).
2. Hugging Face transformers on the same random weights (LlamaForCausalLM from a LlamaConfig, our
   tensors copied in), `generate` greedy with a static cache: eager (disable_compile), and with
   --hf-compile also as transformers runs a static cache by default (torch.compile,
   reduce-overhead). Goal: attnbench's request latency at least 1.5x lower.

Each engine row runs once per engine of `--engines`, a K/V write (attention.KV_WRITES: K and V
stored by two index_copy_ launches, or by fused_ops.write_kv's one; "triton-rope": RoPE on q and k
and both stores in one launch, fused_ops.rope_write_kv) and a projection
(elementwise.PROJECTIONS: F.linear, fused_ops.gemv on one-token steps, or "auto": the GEMV only for
the weight shapes where it timed faster here, its choices printed), on the same model in
the same run, so their ratios are solid; "kv write alone" times what lies between one step's qkv
GEMMs and attention kernels (every layer's RoPE and K/V writes, in one CUDA graph) at a few token
counts, and checks every write's q and caches against the first's (the same bytes, or q and K within one
bf16 rounding where RoPE ran in another kernel, V the same bytes); "engines agree" compares
every engine's tokens and first logits with the first's.

Both figures are printed whatever they are. Results go to --out as JSON after every stage, so a
run cut short by a timeout keeps what it measured. Not a test: nothing here asserts.

    python3 benchmarks/e2e_floor.py --out floor.json --hf-compile [--engines torch+linear,triton+linear,triton+gemv,triton+auto,triton-rope+auto]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from attnbench.e2e.runner import ModelEngines
from attnbench.e2e.agreement import run_metrics
from attnbench.e2e.scheduler import make_prompts
from attnbench.e2e.attention import KV_WRITES
from attnbench.e2e.checkpoint import hf_state_dict
from attnbench.e2e.elementwise import PROJECTIONS
from attnbench.e2e.model import ModelArgs, fused, random_model
from attnbench.e2e.modes import GraphMode
from attnbench.kernels.check import check_output
from e2e_floor_parts import WAYS, copy_bandwidth_gbs, gemv_per_shape, kv_write_alone, projections_alone, replay_ms

WAY_NAMES = [name for name, _, _ in WAYS]


def measured(engine, prompt: list[int], output_len: int, warmup: int, iters: int):
    """The untimed check run (it records logits, and captures graphs made on first use), the warm-up
    runs, then the measured runs' metrics: (check, metrics)."""
    check = engine.generate([prompt], output_len, record_logits=True)
    for _ in range(warmup):
        engine.generate([prompt], output_len)
    return check, run_metrics([engine.generate([prompt], output_len) for _ in range(iters)], 1, output_len)


def attnbench_run(runner: ModelEngines, backend: str, strategy: str, prompt: list[int], output_len: int, warmup: int,
                  iters: int) -> dict:
    engine = runner.engine(backend, strategy, GraphMode.DECODE)
    check, metrics = measured(engine, prompt, output_len, warmup, iters)
    replay = engine.decode.replays[1]  # the batch-1 decode graph's replay
    return {**metrics, "graph_replay_ms": replay_ms(replay, 50),  # the step's GPU time with no host work between
            "tokens": check.tokens[0], "first_logits": check.logits[0, 0].float(),
            "decode_logits": check.logits[0, 1].float()}  # the first decode step's (the first is the prefill's)


def full_graph_steps(runner: ModelEngines, backend: str, strategy: str, prompt: list[int], output_len: int,
                     warmup: int, iters: int) -> dict:
    """Under full graphs: the p50 prefill step and decode step (CUDA events around each replay)."""
    engine = runner.engine(backend, strategy, GraphMode.FULL)
    m = measured(engine, prompt, output_len, warmup, iters)[1]
    return {"prefill_step_ms": m["prefill_step_p50_ms"], "decode_step_ms": m["decode_step_p50_ms"],
            "prefill_over_decode": m["prefill_step_p50_ms"] / m["decode_step_p50_ms"], "graphs": engine.graph_stats()[0]}


def hf_model(model):
    import transformers

    a = model.args
    if a.qkv_bias:
        raise SystemExit(f"{a.name} has qkv biases: LlamaForCausalLM cannot hold it; use a Llama preset")
    config = transformers.LlamaConfig(
        vocab_size=a.vocab_size, hidden_size=a.dim, intermediate_size=a.ffn_dim, num_hidden_layers=a.n_layer,
        num_attention_heads=a.n_head, num_key_value_heads=a.n_kv_head, rms_norm_eps=a.norm_eps,
        max_position_embeddings=a.max_positions, tie_word_embeddings=False)
    default = torch.get_default_dtype()
    torch.set_default_dtype(model.tok_embeddings.dtype)
    try:
        with torch.device(model.tok_embeddings.device):
            hf = transformers.LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    missing, unexpected = hf.load_state_dict(hf_state_dict(model), strict=False)
    if unexpected or any("rotary" not in k for k in missing):
        raise RuntimeError(f"weights did not map: missing {missing[:3]}, unexpected {unexpected[:3]}")
    hf.generation_config.eos_token_id = None  # exactly output_len tokens, like attnbench (EOS ignored)
    return hf.eval(), transformers.__version__


def hf_run(hf, prompt: list[int], output_len: int, compile: bool, warmup: int, iters: int) -> dict:
    ids = torch.tensor([prompt], device=hf.device)

    def generate():
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=output_len, do_sample=False,
                          cache_implementation="static", disable_compile=not compile, pad_token_id=0)
        torch.cuda.synchronize()
        return time.perf_counter() - start, out[0, len(prompt):].tolist()

    first_s, tokens = generate()  # compiles when compile is on: reported, never counted
    for _ in range(warmup):
        generate()
    times = sorted(generate()[0] for _ in range(iters))
    return {"request_p50_s": times[len(times) // 2], "first_call_s": first_s, "tokens": tokens,
            "generated": len(tokens)}


def first_divergence(a: list[int], b: list[int]) -> str:
    return next((f"step {i}" for i, (x, y) in enumerate(zip(a, b)) if x != y), "none")


def goal(value: float, bound: float, at_most: bool = True) -> str:
    met = value <= bound if at_most else value >= bound
    return f"goal {'<=' if at_most else '>='} {bound}: {'met' if met else 'not met'}"


def print_table(r: dict, input_len: int, output_len: int, engines: list[str]) -> None:
    runs = [f"{s}_{w}" for w in engines for s in ("unified", "split")]
    kv_writes = kv_writes_of(engines)
    rows = [("copy bandwidth (GB/s, read+write)", f"{r['copy_gbs']:.0f}", ""),
            ("weight-read floor (ms)", f"{r['floor_ms']:.3f}", f"{r['weight_gb']:.2f} GB bf16 weights"),
            *[(f"projections alone, {k} (ms)", f"{r[f'gemv_{k}_ms']:.3f}", f"{r[f'gemv_{k}_floor_ratio']:.2f}x floor")
              for k in WAY_NAMES if f"gemv_{k}_floor_ratio" in r],
            *[(f"projection {shape} ({r[f'{shape}_shape']}), one call (us): " + " / ".join(WAY_NAMES),
               " / ".join(f"{r[f'{shape}_{k}_us']:.1f}" if isinstance(r.get(f"{shape}_{k}_us"), float) else "failed"
                          for k in WAY_NAMES),
               "GB/s " + " / ".join(f"{r[f'{shape}_{k}_gbs']:.0f}" if f"{shape}_{k}_gbs" in r else "-" for k in WAY_NAMES)
               + f"; triton {r[f'{shape}_triton_config']}")
              for shape in ("wqkv", "wo", "w13", "w2", "lm_head") if f"{shape}_shape" in r],
            *[(f"one step's RoPE and K/V writes, {n} token(s), kv-write {w} (us)", f"{r[f'kv_write_{w}_{n}tok_us']:.1f}",
               f"against {kv_writes[0]}: {r[f'kv_write_{n}tok_agreement']}" if w != kv_writes[0] else "")
              for n in (1, 16, 256, 2048) for w in kv_writes if f"kv_write_{w}_{n}tok_us" in r],
            *[(f"attnbench decode step, graphs, {run} (ms)", f"{r[f'{run}_decode_step_ms']:.3f}",
               f"{r[f'{run}_floor_ratio']:.2f}x floor ({goal(r[f'{run}_floor_ratio'], 1.3)}); "
               f"replay alone {r[f'{run}_graph_replay_ms']:.3f} ms") for run in runs if f"{run}_decode_step_ms" in r],
            *[(f"full graphs, {run}: {input_len}-token prefill step / decode step (ms)",
               f"{r[f'full_{run}_prefill_step_ms']:.3f} / {r[f'full_{run}_decode_step_ms']:.3f}",
               f"{r[f'full_{run}_prefill_over_decode']:.2f}x ({goal(r[f'full_{run}_prefill_over_decode'], 1.5)})")
              for run in runs if f"full_{run}_prefill_step_ms" in r],
            *[(f"{key.removesuffix('_projection_choices')}: the GEMV or F.linear per weight shape", r[key], "")
              for key in r if key.endswith("_projection_choices")],
            *[(f"{key.removesuffix('_first_divergence')}: tokens part at / first decode logits rel L2",
               f"{r[key]} / {r[key.replace('_first_divergence', '_decode_logits_rel_l2')]:.2e}", "")
              for key in r if key.endswith("_first_divergence") and not key.startswith("hf_")],
            *[(f"attnbench request {input_len}/{output_len} bs1, unified, {w} (s)",
               f"{r[f'unified_{w}_request_p50_s']:.3f}", "") for w in engines if f"unified_{w}_request_p50_s" in r],
            *[(f"transformers {k.split('_')[1]} static-cache generate (s)", f"{r[f'{k}_request_p50_s']:.3f}",
               "; ".join(f"attnbench ({w}) {r[f'{k}_speedup_of_attnbench_{w}']:.2f}x faster "
                         f"({goal(r[f'{k}_speedup_of_attnbench_{w}'], 1.5, at_most=False)})"
                         for w in engines if f"{k}_speedup_of_attnbench_{w}" in r))
              for k in ("hf_eager", "hf_compiled") if f"{k}_request_p50_s" in r]]
    print("\n| measure | value | note |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |", flush=True)


def attnbench_runs(model, args, prompt: list[int], floor_ms: float, save) -> dict:
    """The decode-graph and full-graph rows of both strategies, once per engine of --engines (a K/V
    write and a projection), each on its own engines and KV cache over the same model."""
    ours = {}
    for variant in args.engines:
        kv_write, projection = variant.split("+")
        model.use_projection(projection)
        if model.projection_choices:  # "auto": what it chose per shape, before the engine's rows
            save(f"projections {variant}", **{f"{variant}_projection_choices": "; ".join(
                choice.describe(shape) for shape, choice in model.projection_choices.items())})
        runner = ModelEngines(model, max_num_seqs=1, max_model_len=args.input_len + args.output_len, kv_write=kv_write)
        for strategy in ("unified", "split"):
            run = f"{strategy}_{variant}"
            ours[run] = m = attnbench_run(runner, args.backend, strategy, prompt, args.output_len, args.warmup, args.iters)
            save(f"attnbench {run}", fused_ops=fused.status, **{
                f"{run}_decode_step_ms": m["decode_step_p50_ms"], f"{run}_graph_replay_ms": m["graph_replay_ms"],
                f"{run}_request_p50_s": m["request_p50_s"], f"{run}_floor_ratio": m["decode_step_p50_ms"] / floor_ms})
        for strategy in ("unified", "split"):
            full = full_graph_steps(runner, args.backend, strategy, prompt, args.output_len, args.warmup, args.iters)
            save(f"full graphs {strategy}_{variant}", **{f"full_{strategy}_{variant}_{k}": v for k, v in full.items()})
        del runner
        torch.cuda.empty_cache()
    model.use_projection("linear")
    save("engines agree", **engines_agree(ours, args.engines))
    return ours


def engines_agree(ours: dict, engines: list[str]) -> dict:
    """Against the first engine: the K/V writes store the same bytes, so one projection gives the
    same greedy tokens; the gemv sums in another order, so its tokens part at a near tie if at all:
    the step they part at, and the first decode step's logits' relative L2 distance (the prefill,
    many token rows, runs F.linear under every projection)."""
    outs = {}
    for strategy in ("unified", "split"):
        base = ours[f"{strategy}_{engines[0]}"]
        for variant in engines[1:]:
            other = ours[f"{strategy}_{variant}"]
            key = f"{strategy}_{variant}_vs_{engines[0]}"
            outs[f"{key}_first_divergence"] = first_divergence(base["tokens"], other["tokens"])
            outs[f"{key}_decode_logits_rel_l2"] = check_output(other["decode_logits"], base["decode_logits"],
                                                               "bfloat16")["rel_l2_error"]
    return outs


def kv_writes_of(engines: list[str]) -> list[str]:
    """The K/V writes of KV_WRITE+PROJECTION engines, each once, in order."""
    return list(dict.fromkeys(engine.split("+")[0] for engine in engines))


def engine_list(text: str) -> list[str]:
    """--engines: KV_WRITE+PROJECTION items, each checked, so a typo stops the run before the GPU work."""
    engines = [item.strip() for item in text.split(",") if item.strip()]
    for item in engines:
        kv_write, _, proj = item.partition("+")
        if kv_write not in KV_WRITES or proj not in PROJECTIONS:
            raise argparse.ArgumentTypeError(f"{item!r}: want KV_WRITE+PROJECTION, KV_WRITE one of {', '.join(KV_WRITES)}, "
                                             f"PROJECTION one of {', '.join(PROJECTIONS)}")
    if not engines or len(set(engines)) != len(engines):
        raise argparse.ArgumentTypeError(f"{text!r}: give each engine once, at least one")
    return engines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-7b")
    parser.add_argument("--backend", default="vllm-fa2")
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--engines", type=engine_list, default=engine_list("torch+linear,triton+linear,triton+gemv,triton+auto,triton-rope+auto"),
                        help="engine variants, comma-separated KV_WRITE+PROJECTION (attention.KV_WRITES, "
                             "elementwise.PROJECTIONS); the first is the baseline")
    parser.add_argument("--hf-compile", action="store_true", help="also time transformers' default static-cache compile")
    parser.add_argument("--deadline-s", type=float, default=1e9, help="skip stages that would start after this")
    parser.add_argument("--out", type=Path, default=Path("floor.json"))
    args = parser.parse_args()
    started = time.perf_counter()
    device = torch.device("cuda")
    results: dict = {"model": args.model, "backend": args.backend, "input_len": args.input_len, "output_len": args.output_len,
                     "warmup": args.warmup, "iters": args.iters, "engines": args.engines,
                     "gpu": torch.cuda.get_device_name(device)}

    def save(stage: str, **values) -> None:
        results.update(values)
        args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")
        print(f"[{time.perf_counter() - started:6.1f} s] {stage}: " + ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items()), flush=True)

    bandwidth = copy_bandwidth_gbs(device)
    margs = ModelArgs.from_name(args.model)
    weight_bytes = margs.num_params * 2
    save("floor", copy_gbs=bandwidth, weight_gb=weight_bytes / 1e9, floor_ms=weight_bytes / (bandwidth * 1e9) * 1e3)

    model = random_model(margs, torch.bfloat16, device, seed=0)
    save("projections alone", **projections_alone(model, results["floor_ms"]))
    save("projections per shape", **gemv_per_shape(model))
    save("kv write alone", **kv_write_alone(margs, kv_writes_of(args.engines), device))
    prompt = make_prompts(1, args.input_len, margs.vocab_size, seed=0)[0]
    ours = attnbench_runs(model, args, prompt, results["floor_ms"], save)

    def table() -> None:
        print_table(results, args.input_len, args.output_len, args.engines)
    try:
        hf, version = hf_model(model)
    except ImportError as exc:
        save("transformers", hf="skipped: " + str(exc))
        return table()
    with torch.inference_mode():
        hf_logits = hf(torch.tensor([prompt], device=device)).logits[0, -1].float()
    ours_logits = ours[f"unified_{args.engines[0]}"]["first_logits"]
    save("transformers model", transformers=version, first_step_max_logit_diff=float((hf_logits - ours_logits).abs().max()),
         logit_spread=float(ours_logits.std()))
    for compile in (False, True):
        if compile and not args.hf_compile:
            continue
        if compile and time.perf_counter() - started > args.deadline_s - 150:
            save("hf compiled", hf_compiled="skipped: less than 150 s left before --deadline-s")
            continue
        if compile:  # the compile may outlast a timeout: show what is measured so far first
            table()
        label = "hf_compiled" if compile else "hf_eager"
        m = hf_run(hf, prompt, args.output_len, compile, warmup=1, iters=3 if not compile else args.iters)
        save(label, **{f"{label}_request_p50_s": m["request_p50_s"], f"{label}_first_call_s": m["first_call_s"],
                       f"{label}_generated": m["generated"],
                       **{f"{label}_speedup_of_attnbench_{w}": m["request_p50_s"] / ours[f"unified_{w}"]["request_p50_s"]
                          for w in args.engines},
                       f"{label}_tokens_vs_attnbench_first_divergence":
                           first_divergence(ours[f"unified_{args.engines[0]}"]["tokens"], m["tokens"])})
    table()

if __name__ == "__main__":
    main()
