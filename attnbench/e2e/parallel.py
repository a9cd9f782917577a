"""Tensor parallelism for the e2e model: Megatron's split as gpt-fast's tp.py does it, a process per GPU.

Why it exists: 70B-class models do not fit one GPU, and what a kernel sees on each GPU is the
tensor-parallel share of the heads (64 query / 8 KV heads at TP 2 are 32/4 per GPU), which
changes the unified-vs-split answer. Under torchrun every rank builds its share of the model and
runs the same scheduler on the same requests, so all ranks take the same decisions (steps, graph
buckets, block tables) and their collectives pair up.

The split. wq/wk/wv (one wqkv here) and w1/w3 (w13) are column-parallel: rank r holds query heads
[r n_head/tp, (r+1) n_head/tp), its KV heads likewise, and the r-th slice of the MLP width. wo and
w2 are row-parallel (the matching input columns), each followed by an all-reduce, a forward hook
on the attention and MLP modules as in gpt-fast. Embeddings, norms and the LM head are
replicated: every rank computes the whole logits from the same all-reduced hidden state and
samples the same token, with no gather (the simplest choice; it costs vocab x dim weights per
rank). Each rank's KV cache holds its KV heads only.

Weights. A rank draws every whole tensor exactly as TP 1 draws it (model.fill_random_, one
generator from the seed, parameter order) on its own device, one tensor at a time, and keeps its
slice (`shard`): the shards are slices of the TP-1 weights by construction (on GPUs of one model:
CUDA's draws depend on the SM count), and TP 1 is left as it was. The cost: every rank draws all
the weights (seconds on a GPU) and holds one whole tensor beside its shard at a time (the largest,
a 70B model's w13, is 0.9 GB in bf16). Checkpoints are read the same way: whole tensors from the
safetensors files, sliced by `shard`. Generating only a rank's slice would need a generator per
chunk of every tensor, and TP-1 weights unlike today's.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Callable, Iterator, TypeVar

import torch
import torch.distributed as dist

from attnbench.device import resolve_device, select
from attnbench.e2e.model import ModelArgs, Transformer, fill_random_
from attnbench.errors import AttnbenchError, UsageError

T = TypeVar("T")
MAX_TP = 64


@dataclass(frozen=True)
class TensorParallel:
    """This process's place in the tensor-parallel group: plain data (a worker can be sent it)."""

    rank: int = 0
    size: int = 1

    @property
    def leader(self) -> bool:
        """Rank 0: the one that owns the run directory and writes the rows."""
        return self.rank == 0


SINGLE = TensorParallel()


def check_tp(tp: int, args: ModelArgs) -> None:
    """Refuse a --tp that does not split the model's query heads, KV heads and MLP width evenly."""
    for count, what in ((args.n_head, "query heads"), (args.n_kv_head, "KV heads"), (args.ffn_dim, "MLP width")):
        if count % tp:
            raise UsageError(f"--tp {tp}: {args.name}'s {what} ({count}) do not split over {tp} ranks; use a --tp "
                             f"that divides {args.n_head} query heads, {args.n_kv_head} KV heads and the MLP width {args.ffn_dim}")


def rank_args(args: ModelArgs, tp_size: int) -> ModelArgs:
    """One rank's share of the model: n_head/tp query and n_kv_head/tp KV heads, ffn_dim/tp; hidden
    size, head dim and vocabulary stay whole. Its num_params is one rank's weights (embeddings, LM
    head and norms replicated); its heads are what the rank's attention kernel and KV cache see."""
    if tp_size == 1:
        return args
    return replace(args, n_head=args.n_head // tp_size, n_kv_head=args.n_kv_head // tp_size,
                   ffn_dim=args.ffn_dim // tp_size)


def shard(name: str, full: torch.Tensor, args: ModelArgs, tp: TensorParallel) -> torch.Tensor:
    """Rank tp.rank's part of the whole (TP-1) parameter `name` of a model with `args`."""
    if tp.size == 1:
        return full

    def mine(t: torch.Tensor, dim: int = 0) -> torch.Tensor:
        return t.chunk(tp.size, dim)[tp.rank]

    part = name.rsplit(".", 1)[-1]
    if part in ("wqkv", "bqkv"):  # column-parallel by heads: this rank's q heads, then its k and v heads
        q, kv = args.n_head * args.head_dim, args.n_kv_head * args.head_dim
        return torch.cat([mine(t) for t in full.split([q, kv, kv])])
    if part == "w13":  # column-parallel: this rank's slice of the gate rows, then of the up rows
        return torch.cat([mine(t) for t in full.chunk(2)])
    if part in ("wo", "w2"):  # row-parallel: the input columns of this rank's heads / MLP slice
        return mine(full, 1)
    return full  # embeddings, norms, LM head: replicated


def _all_reduce(module, inputs, output: torch.Tensor) -> None:
    dist.all_reduce(output)  # in place: the module's output becomes the sum over the ranks


def all_reduce_outputs_(model: Transformer) -> Transformer:
    """Sum the row-parallel outputs over the ranks: after each attention (wo) and MLP (w2)."""
    for layer in model.layers:
        for module in (layer.attention, layer.feed_forward):
            module.register_forward_hook(_all_reduce)
    return model


@torch.no_grad()
def random_rank_model(args: ModelArgs, dtype: torch.dtype, device, seed: int, tp: TensorParallel) -> Transformer:
    """This rank's shard of random_model(args, dtype, device, seed); all_reduce_outputs_ makes it run."""
    model = Transformer(rank_args(args, tp.size), dtype, device)
    whole = dict(Transformer(args, dtype, "meta").named_parameters())  # shapes only
    gen = torch.Generator(device=device).manual_seed(seed)
    for name, p in model.named_parameters():  # the same order, hence the same draws, as TP 1
        if p.shape == whole[name].shape:  # replicated: drawn in place
            fill_random_(name, p, gen)
            continue
        full = torch.empty(whole[name].shape, dtype=dtype, device=device)
        fill_random_(name, full, gen)
        p.copy_(shard(name, full, args, tp))
        del full
    return model


# --- the process group --------------------------------------------------------------------------

def _rank_device(device_flag: str, local_rank: int) -> torch.device:
    device = resolve_device(device_flag)
    if device.type == "cpu":
        return device
    if device.index is not None:
        raise UsageError(f"--device {device_flag}: with --tp each rank uses cuda:LOCAL_RANK; give --device cuda or auto")
    if local_rank >= torch.cuda.device_count():
        raise UsageError(f"--tp: rank with LOCAL_RANK {local_rank} has no GPU; this machine has "
                         f"{torch.cuda.device_count()} (--nproc-per-node must not exceed them)")
    return torch.device("cuda", local_rank)


def placement(tp: int, device_flag: str) -> tuple[TensorParallel, torch.device]:
    """This process's rank and device, checked as tensor_parallel checks them, without starting a
    process group (so `attnbench run --check` refuses what the run would). --tp N needs N devices
    and, to run, one process per rank under torchrun."""
    world = os.environ.get("WORLD_SIZE")
    if tp == 1:
        if world is not None and world != "1":
            raise UsageError(f"--tp 1 under torchrun with WORLD_SIZE={world}: every process would run the whole "
                             f"model on its own; give --tp {world} to split it over them")
        return SINGLE, select(resolve_device(device_flag))
    if world is None:
        device = resolve_device(device_flag)
        if device.type == "cuda" and torch.cuda.device_count() < tp:
            raise UsageError(f"--tp {tp}: needs {tp} GPUs, one per rank; this machine has {torch.cuda.device_count()}")
        raise UsageError(f"--tp {tp}: needs one process per rank; run it under torchrun: python -m "
                         f"torch.distributed.run --nproc-per-node {tp} -m attnbench e2e ... --tp {tp}")
    if world != str(tp):
        raise UsageError(f"--tp {tp}: torchrun started WORLD_SIZE={world} processes; --tp must equal "
                         "--nproc-per-node x nodes")
    rank = int(os.environ["RANK"])
    return TensorParallel(rank, tp), _rank_device(device_flag, int(os.environ.get("LOCAL_RANK", rank)))


@contextmanager
def tensor_parallel(tp: int, device_flag: str) -> Iterator[tuple[TensorParallel, torch.device]]:
    """This process's rank and device (placement). --tp 1: no process group, --device as given.
    --tp N: under torchrun (RANK, WORLD_SIZE = N, LOCAL_RANK), NCCL on cuda:LOCAL_RANK or gloo on the CPU."""
    here, device = placement(tp, device_flag)
    if tp == 1:
        yield here, device
        return
    rank = here.rank
    if device.type == "cuda":
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=rank, world_size=tp, device_id=device)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=tp)
    try:
        yield here, device
        # every rank done before any tears its group down: without it a rank that finished first
        # (rank 1 of tp_agreement) sometimes aborted at exit under gloo ("terminate called without
        # an active exception", 4 of ~30 CPU runs; 0 of 14 with it). Not on an error: torchrun ends the rest
        ids = [device.index] if device.type == "cuda" else None
        _bounded(lambda: dist.barrier(device_ids=ids), f"rank {rank}: the final barrier", TEARDOWN_S)
    finally:
        # NCCL: not destroyed. On the 2-GPU H200 (torch 2.11, NCCL all-reduce inside captured decode
        # graphs) destroy_process_group hung in ProcessGroupNCCL.shutdown on both ranks after the
        # barrier had passed, with tiny and with llama-2-70b. The rank ends right after (exit_now),
        # which releases the communicators; a gloo group is destroyed as before.
        if device.type != "cuda":
            _bounded(dist.destroy_process_group, f"rank {rank}: destroying the process group", TEARDOWN_S)


# How long a rank waits for the group's teardown (the barrier; a gloo group's destruction). On the
# 2-GPU H200, llama-2-70b TP 2 wrote all its files and then never exited: NCCL's shutdown hung.
TEARDOWN_S = 60.0
_TEARDOWN = {"ok": True}


def _bounded(fn: Callable[[], object], what: str, seconds: float) -> None:
    """fn() in a daemon thread, waited on for `seconds`. If it has not returned by then, say so on
    stderr with every thread's stack (to see where it hangs) and go on: the caller ends the process
    with exit_now(teardown_code()), non-zero, so that torchrun ends the other ranks instead of
    waiting for them. An error inside fn is reported the same way."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001  reported below, never raised from a teardown
            failure.append(exc)

    thread = threading.Thread(target=target, daemon=True, name="attnbench-teardown")
    thread.start()
    thread.join(seconds)
    if thread.is_alive() or failure:
        _TEARDOWN["ok"] = False
        why = f"failed: {failure[0]}" if failure else f"did not finish in {seconds:.0f} s"
        print(f"attnbench: {what} {why}; the results already written stand (stacks follow)", file=sys.stderr)
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            print(f"--- thread {names.get(ident, ident)}", file=sys.stderr)
            traceback.print_stack(frame, file=sys.stderr)


def teardown_code(code: int = 0) -> int:
    """The exit code for a rank: `code`, or 1 if its process group's teardown hung or failed."""
    return code if _TEARDOWN["ok"] else max(code, 1)


def exit_now(code: int) -> None:
    """End a rank's process at once, skipping the interpreter's teardown. After a gloo group is
    destroyed, a collective-library thread still being torn down sometimes aborts the exit
    ("terminate called without an active exception", SIGABRT: about 1 CPU run in 7, even after
    the barrier above), and torchrun then reports a failed run whose work all finished. Call it
    only when every file is written and closed; stdout and stderr are flushed here."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def describe(tp: TensorParallel) -> dict:
    """What env.json records of the group: its size, the collective library, NVLink multicast."""
    if tp.size == 1:
        return {"size": 1}
    backend = dist.get_backend()
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if backend == "nccl" else None
    return {"size": tp.size, "backend": backend, "nccl": nccl,
            "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE")}


def agree(tp: TensorParallel, fn: Callable[[], T]) -> T:
    """fn() on every rank; if it fails on any, every rank fails with that message (a rank that went
    on alone would wait in its next collective until the process group's timeout). Without a
    process group (`attnbench run --check` under torchrun checks before any starts) each rank
    answers for itself."""
    if tp.size == 1 or not dist.is_initialized():
        return fn()
    error, result = None, None
    try:
        result = fn()
    except Exception as exc:  # noqa: BLE001  shared with the other ranks, then raised here
        error = exc
    errors: list = [None] * tp.size
    dist.all_gather_object(errors, None if error is None else str(error))
    failed = next((r for r, e in enumerate(errors) if e is not None), None)
    if error is not None:
        raise error
    if failed is not None:
        raise AttnbenchError(f"rank {failed}: {errors[failed]}")
    return result


def from_leader(tp: TensorParallel, fn: Callable[[], T]) -> T:
    """fn() on rank 0 only; its value (or its error) on every rank."""
    value = agree(tp, fn if tp.leader else lambda: None)
    if tp.size == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def same_on_every_rank(tp: TensorParallel, value, what: str) -> None:
    """Check that every rank holds the same `value` (e.g. the greedy tokens they sampled)."""
    if tp.size == 1:
        return
    values: list = [None] * tp.size
    dist.all_gather_object(values, value)
    differ = [r for r, v in enumerate(values) if v != values[0]]
    if differ:
        raise AttnbenchError(f"ranks {differ} hold other {what} than rank 0: the ranks diverged")
