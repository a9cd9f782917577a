"""Tensor parallel vs one device: greedy tokens of TP N against TP 1 (attnbench.e2e.tp_check), under torchrun.

Rank 0 runs the whole model alone (it must fit one device), then every rank runs its shard;
rank 0 prints one line per strategy x graph mode and writes them as JSON to --out. Exit 1 when
any verdict is MISMATCH or non-finite. Not a benchmark of speed: nothing is timed.

    python -m torch.distributed.run --nproc-per-node 2 benchmarks/tp_agreement.py --model llama-13b \\
        --backend vllm-fa3 --out tp-agreement.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from attnbench.e2e.parallel import check_tp, exit_now, teardown_code, tensor_parallel
from attnbench.e2e.agreement import FAILING
from attnbench.e2e.modes import GraphMode
from attnbench.e2e.runner import resolve_model
from attnbench.e2e.tp_check import tp_agreement


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-13b")
    parser.add_argument("--backend", default="vllm-fa3")
    parser.add_argument("--strategy", default="unified,split")
    parser.add_argument("--mode", default="graph,eager", help="graph and/or eager")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    opts = parser.parse_args()
    args, checkpoint = resolve_model(opts.model)
    tp_size = int(os.environ.get("WORLD_SIZE", "1"))
    check_tp(tp_size, args)
    results = []
    with tensor_parallel(tp_size, opts.device) as (tp, device):
        for strategy in opts.strategy.split(","):
            for mode in opts.mode.split(","):
                agreement = tp_agreement(args, checkpoint, tp, device, opts.dtype, opts.backend, strategy,
                                         GraphMode.DECODE if mode == "graph" else GraphMode.NONE, opts.batch_size, opts.input_len, opts.output_len, opts.seed)
                if tp.leader:
                    row = {"model": args.name, "tp": tp.size, "backend": opts.backend, "strategy": strategy,
                           "mode": mode, **agreement.row()}
                    results.append(row)
                    print(f"TP {tp.size} vs TP 1, {args.name} {opts.backend} {strategy} {mode}: {agreement.verdict} "
                          f"(tokens equal {agreement.tokens_equal:.1%}, max logit diff {agreement.max_logit_diff:.3g} "
                          f"of spread {agreement.logit_scale:.3g}"
                          + (f", first divergence {agreement.first_divergence}" if agreement.first_divergence else "")
                          + ")", flush=True)
                    if opts.out:
                        opts.out.write_text(json.dumps(results, indent=1))
    return 1 if any(r["verdict"] in FAILING for r in results) else 0


if __name__ == "__main__":
    code = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        exit_now(teardown_code(code))  # a rank's teardown after its gloo group can abort (parallel.exit_now)
    sys.exit(code)
