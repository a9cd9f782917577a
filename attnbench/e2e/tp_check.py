"""TP N against TP 1 on the same requests: the same greedy tokens, up to a near-tie.

Why it exists: tensor parallelism must not change what the model computes. It does change the
last bits (each row-parallel GEMM's sum is split over the ranks and summed again in the model's
dtype by the all-reduce), so on random weights' flat logits a near-tie may flip
(agreement.compare_generations says `near-tie`); a wrong shard, a query head paired with another
rank's KV head, or a graph replaying a stale all-reduce gives garbage, a `MISMATCH`.

Rank 0 first runs the whole model alone (it must fit one device), then every rank runs its
shard on the same prompts with the same backend, strategy and graph mode, and rank 0 compares.
benchmarks/tp_agreement.py runs it under torchrun.
"""

from __future__ import annotations

import gc
from pathlib import Path

import torch

from attnbench.e2e.model import ModelArgs
from attnbench.e2e.modes import GraphMode
from attnbench.e2e.parallel import SINGLE, TensorParallel, agree, same_on_every_rank
from attnbench.e2e.agreement import Agreement, compare_generations
from attnbench.e2e.runner import ModelSpec
from attnbench.e2e.scheduler import make_prompts


def generate(spec: ModelSpec, backend: str, strategy: str, cudagraph: GraphMode, prompts: list[list[int]],
             output_len: int) -> tuple[list[list[int]], torch.Tensor]:
    """Greedy tokens and their logits (on the host) of one run on the model `spec` builds."""
    engine = spec.build().engine(backend, strategy, cudagraph)
    run = engine.generate(prompts, output_len, record_logits=True)
    result = run.tokens, run.logits.cpu()
    del engine, run
    gc.collect()
    if spec.device.type == "cuda":
        torch.cuda.empty_cache()  # rank 0's whole model goes before its shard comes
    return result


def tp_agreement(args: ModelArgs, checkpoint: Path | None, tp: TensorParallel, device: torch.device, dtype: str,
                 backend: str, strategy: str, cudagraph: GraphMode, batch_size: int, input_len: int, output_len: int,
                 seed: int = 0) -> Agreement | None:
    """The TP-N run compared with the TP-1 run (on rank 0; None on the other ranks)."""
    prompts = make_prompts(batch_size, input_len, args.vocab_size, seed)
    spec = ModelSpec(args, checkpoint, dtype, device, seed, batch_size, input_len + output_len, 16, None, SINGLE)
    single = agree(tp, lambda: generate(spec, backend, strategy, cudagraph, prompts, output_len) if tp.leader else None)
    spec = ModelSpec(args, checkpoint, dtype, device, seed, batch_size, input_len + output_len, 16, None, tp)
    tokens, logits = agree(tp, lambda: generate(spec, backend, strategy, cudagraph, prompts, output_len))
    same_on_every_rank(tp, tokens, "greedy tokens")
    return compare_generations(single[0], single[1], tokens, logits) if tp.leader else None
