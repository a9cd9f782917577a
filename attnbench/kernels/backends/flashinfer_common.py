"""What the FlashInfer backends share: the library, the paged index arrays, workspaces, wrapper reuse.

FlashInfer (flashinfer-python; 0.6.6 on the GPU machine, checked against 0.7.4's API) plans a batch
once per wrapper (`wrapper.plan(...)` on the host) and runs it many times (`wrapper.run(q, (k_cache,
v_cache), out=out)`). attnbench's paged cache is FlashInfer's NHD layout with page_size =
block_size; a plan turns attnbench's block table and KV lengths into FlashInfer's three arrays
(`paged_kv_arrays`).

Workspaces. A wrapper takes a float workspace and makes its own int workspace (8 MB on the device
plus an 8 MB pinned host copy: prefill.py BatchPrefillWithPagedKVCacheWrapper.__init__, decode.py
BatchDecodeWithPagedKVCacheWrapper.__init__). The float workspace only holds split-KV partial
outputs while one run executes, so one per device serves every wrapper of a backend instance (runs
are ordered on one stream). It grows when a plan asks for more: FlashInfer's planner raises "Buffer
overflow when allocating memory for <name> with size <n> ... Increase the workspace buffer size"
(include/flashinfer/allocator.h); CUDA-graph-mode plans reserve for a padded grid, which grows with the
batch size, heads and head dim (docs/kernels/flashinfer.md has sizes). Wrappers planned before keep
the buffer they were planned with.
The int workspace holds a plan's schedule (plan_info) and a graph-mode wrapper's fixed index
buffers hold its page table: both belong to one wrapper, and a wrapper to one live plan. Plans
alive together (unified and split timed interleaved, a split plan's two wrappers, the e2e engine's
decode-graph buckets) therefore never overwrite each other's schedule. When a plan is collected,
its wrappers go back to a small pool and the next plan of the same shape re-plans them, as vLLM
keeps its wrappers and re-plans them every step: host_plan_us measures planning, not the
construction of wrappers. A launch must not outlive its plan (the sweep and the engine hold plans).
"""

from __future__ import annotations

import functools
import importlib
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

from attnbench.kernels.backends.base import dist_version
from attnbench.kernels.backends.launch import Part
from attnbench.kernels.metadata import KVCacheMetadata, SplitMetadata, VarlenMetadata

FLOAT_WORKSPACE_BYTES = 256 << 20  # vLLM's FLASHINFER_WORKSPACE_BUFFER_SIZE
POOL_SIZE = 16  # idle wrappers kept for reuse, all shapes together
HEAD_DIMS = (64, 128, 256)  # FlashInfer's attention head dims (vLLM's FlashInferBackend lists the same)
INSTALL = "pip install flashinfer-python"  # no [extra] here: the backends table reads brackets as markup
# FlashInfer's float-workspace allocations (scheduler.cuh: PrefillPlan, DecodePlan, TwoStageHolisticPlan)
OVERFLOW = re.compile(r"allocating memory for (\w*(?:tmp_v|tmp_s|partial_o|partial_lse)) with size (\d+)")


@functools.lru_cache(maxsize=1)
def find_flashinfer() -> tuple[Any, str | None]:
    """The `flashinfer` module, or None and why it does not import."""
    try:
        return importlib.import_module("flashinfer"), None
    except ModuleNotFoundError as exc:
        if exc.name == "flashinfer":
            return None, f"flashinfer-python is not installed ({INSTALL})"
        return None, f"flashinfer does not import: {exc}"  # one of its dependencies is missing
    except Exception as exc:  # a broken build, a missing CUDA library, ...
        return None, f"flashinfer does not import ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"


def library_version(module: Any) -> str:
    version = getattr(module, "__version__", None)
    return str(version) if version else dist_version("flashinfer-python")


def paged_kv_arrays(kv_lens: torch.Tensor, block_table: torch.Tensor,
                    page_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashInfer's paged-KV arrays (host, int32) for sequences of kv_lens keys in block_table's pages.

    paged_kv_indptr [n + 1]: where each sequence's pages start in paged_kv_indices; paged_kv_indices:
    the block ids each sequence uses, sequence after sequence; paged_kv_last_page_len [n]: the keys
    in each last page, 1..page_size, and 0 for a sequence with no keys and no pages (a padding row:
    FlashInfer reads its length as 0, include/flashinfer/page.cuh get_length).
    """
    kv = kv_lens.to("cpu", torch.int32)
    table = block_table.to("cpu", torch.int32)
    pages = (kv + page_size - 1) // page_size
    indptr = torch.zeros(kv.shape[0] + 1, dtype=torch.int32)
    torch.cumsum(pages, 0, dtype=torch.int32, out=indptr[1:])
    used = torch.arange(table.shape[1], dtype=torch.int32)[None, :] < pages[:, None]
    last = torch.where(pages > 0, kv - (pages - 1) * page_size, torch.zeros_like(kv))
    return indptr, table[used], last.to(torch.int32)


def graph_buffers(device: torch.device, num_seqs: int, max_pages: int, prefix: str = "paged_kv_",
                  suffix: str = "_buffer") -> dict[str, torch.Tensor]:
    """The fixed device buffers a wrapper in CUDA-graph mode plans into: batch size num_seqs, room
    for max_pages page ids (the block table's size, an upper bound for any re-plan of its batch)."""
    int32 = {"dtype": torch.int32, "device": device}
    return {f"{prefix}indptr{suffix}": torch.zeros(num_seqs + 1, **int32),
            f"{prefix}indices{suffix}": torch.zeros(max(max_pages, 1), **int32),
            f"{prefix}last_page_len{suffix}": torch.zeros(num_seqs, **int32)}


def float_overflow(exc: BaseException) -> int | None:
    """Bytes a plan asked of the float workspace when FlashInfer says it is too small, else None."""
    found = OVERFLOW.search(str(exc))
    return int(found.group(2)) if found else None


# The workspace and the pooled wrappers outlive the call that made them: an e2e engine plans under
# torch.inference_mode, a kernel sweep does not, and a wrapper's own buffers (made in its __init__,
# updated in place by every plan: prefill.py's _kv_lens_buffer) made as inference tensors cannot be
# updated outside it ("Inplace update to inference tensor outside InferenceMode", seen on the H200
# when a kernel test followed an e2e test in one process). So they are always made as normal tensors.
def long_lived() -> torch.inference_mode:
    return torch.inference_mode(False)


class Workspace:
    """The float workspace of one backend instance: one buffer per device, grown on demand. Zeroed,
    as FlashInfer asks of a float workspace's first use (decode.py BatchDecode...Wrapper.__init__)
    and vLLM allocates its own."""

    def __init__(self, nbytes: int = FLOAT_WORKSPACE_BYTES):
        self.nbytes = nbytes
        self.buffers: dict[torch.device, torch.Tensor] = {}
        self.generation: dict[torch.device, int] = {}  # bumped on growth: keys of reusable wrappers

    def get(self, device: torch.device) -> torch.Tensor:
        if device not in self.buffers:
            with long_lived():
                self.buffers[device] = torch.zeros(self.nbytes, dtype=torch.uint8, device=device)
            self.generation.setdefault(device, 0)
        return self.buffers[device]

    def grow(self, device: torch.device, needed: int) -> None:
        """Replace the device's buffer by one with room for `needed` more bytes (and some spare)."""
        size = self.get(device).numel() + needed + needed // 4 + (16 << 20)
        with long_lived():
            self.buffers[device] = torch.zeros(size, dtype=torch.uint8, device=device)
        self.generation[device] += 1


class WrapperPool:
    """Idle wrappers of collected plans, by shape key, for the next plan of that shape."""

    def __init__(self, capacity: int = POOL_SIZE):
        self.capacity = capacity
        self.idle: OrderedDict[tuple, list] = OrderedDict()
        self.returned: list[tuple[tuple, Any]] = []  # filled by finalizers: appending is all they do

    def take(self, key: tuple, make: Callable[[], Any]) -> Any:
        self._settle()
        stack = self.idle.get(key)
        if not stack:
            with long_lived():  # its buffers serve later plans, in or out of inference mode
                return make()
        wrapper = stack.pop()
        if not stack:
            del self.idle[key]
        return wrapper

    def releaser(self, key: tuple, wrapper: Any) -> Callable[[], None]:
        """Part.release of a plan holding `wrapper`: once the plan is collected, the wrapper is idle.
        It runs as a finalizer, at any point of the program: appending is all it does."""
        return functools.partial(self.returned.append, (key, wrapper))

    def _settle(self) -> None:
        while self.returned:
            key, wrapper = self.returned.pop()
            self.idle.setdefault(key, []).append(wrapper)
            self.idle.move_to_end(key)
        while sum(len(stack) for stack in self.idle.values()) > self.capacity:
            oldest = next(iter(self.idle))
            self.idle[oldest].pop(0)
            if not self.idle[oldest]:
                del self.idle[oldest]


UNKNOWN = "unknown"


def plan_choice(wrapper: Any, attribute: str) -> Any:
    """What a wrapper's plan() chose, kept by FlashInfer in a private attribute: the only such read
    in attnbench. FlashInfer 0.6.6 has no public accessor for either of the two read here (its
    wrappers expose is_cuda_graph_enabled and use_tensor_cores, nothing of the plan): `_plan_info`,
    the scheduler's plan as a list of ints, and `_backend`, the kernel family backend="auto"
    resolved to. A release that renames or drops one gives "unknown" here, never an AttributeError."""
    return getattr(wrapper, attribute, UNKNOWN)


def plan_info(wrapper: Any) -> list[int] | None:
    """The wrapper's plan_info as ints (plan_choice), or None when unknown or not a sequence of ints."""
    info = plan_choice(wrapper, "_plan_info")
    try:
        return None if info is UNKNOWN else [int(v) for v in info]
    except (TypeError, ValueError):  # None before a plan, or not ints
        return None


def plan_info_details(wrapper: Any, part: str) -> dict:
    """What a wrapper's plan chose, read from its plan_info (scheduler.cuh ToVector layouts):
    DecodePlanInfo has 10 entries (split_kv last), PrefillPlanInfo 15 (cta_tile_q at 3, split_kv
    last); FA3's PrefillPlanSM90Info (9) has no split-KV. Empty when the layout is unknown or not
    one of these."""
    info = plan_info(wrapper) or []
    if len(info) == 10:
        return {f"fi_{part}_split_kv": bool(info[9])}
    if len(info) == 15:
        return {f"fi_{part}_split_kv": bool(info[14]), f"fi_{part}_cta_tile_q": info[3]}
    return {}


def wrapper_decisions(wrapper: Any, **more: object) -> Callable[[], dict]:
    """Part.decide of a planned wrapper (decisions.py): the kernel family backend="auto" resolved to
    (`_backend`; unknown: left out) and whether its plan splits the KV (plan_info), read now, at plan
    time, plus `more`."""
    family = plan_choice(wrapper, "_backend")
    split = [v for k, v in plan_info_details(wrapper, "plan").items() if k.endswith("split_kv")]
    chosen = {"fi_backend": None if family is UNKNOWN else str(family), "split_kv": split[0] if split else None,
              **more}
    return lambda: chosen


def refresher(backend: str, strategy: str, parts: dict[str, Part]) -> Callable:
    """Plan.refresh: each part ("unified", or split's "decode" / "prefill") re-planned for its share
    of new metadata, or a refusal. A share the plan has no part for must be empty (a bucket's part
    the capture batch lacked, all padding): rows the plan cannot reach are refused, never left."""
    def refuse(md) -> None:
        raise RuntimeError(f"{backend} {strategy}: planned in FlashInfer's eager mode (the batch has rows with "
                           "more than one query token), so it cannot be re-planned into the buffers a graph captured")

    def replan(md: VarlenMetadata | SplitMetadata) -> None:
        shares = {"unified": md} if strategy == "unified" else {"decode": md.decode, "prefill": md.prefill}
        for role, share in shares.items():
            if role not in parts and share is not None and not _empty(share):
                raise RuntimeError(f"{backend} {strategy}: the plan has no {role} part (it was planned on a batch "
                                   f"without one), so it cannot run this batch's {role} rows")
        for role, part in parts.items():
            if shares[role] is None:
                raise RuntimeError(f"{backend} {strategy}: the batch has no {role} part for the plan's {role} wrapper")
            part.replan(shares[role])
    return refuse if any(part.replan is None for part in parts.values()) else replan


def _empty(share: VarlenMetadata | KVCacheMetadata) -> bool:
    """No query tokens (a varlen share) or no keys for any row (a decode share of padding rows)."""
    if isinstance(share, VarlenMetadata):
        return share.num_tokens == 0
    return not bool(share.cache_seqlens.to("cpu").any())
