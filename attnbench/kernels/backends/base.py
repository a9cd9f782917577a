"""What a backend is: a kernel family that plans a strategy once and runs it many times.

The contract has two phases, as FlashInfer's wrappers (`plan()` then `run()`) and nano-vllm's
`prepare_*` / `run_*` do:

- `plan(strategy, point, metadata) -> Plan` does every host-side thing once: static
  `max_seqlen_q/k`, the op's keyword arguments, the token ranges and 4-D shapes of each launch,
  a library's own planning step and workspaces. It may read metadata back to the host.
- `Plan.run(q, k_cache, v_cache, out)` only launches kernels: no host reads, no syncs, no
  allocation a CUDA graph cannot capture. The same plan serves every layer of an engine step and
  every replay of a captured graph.

The strategy plumbing lives here, once, for every backend. Unified: one varlen launch over the
whole batch. Split: the decode sequences (first in q, one query length) as a 4-D `[seqs,
query_len, heads, dim]` view through the batched kvcache launch, the rest through varlen. Fused:
the same two parts as split, in one launch that runs them concurrently (POD-Attention); a batch
with only one of the parts (a decode-only step) runs that part's kernel, as split does. A backend
supplies its primitives, `plan_varlen` and `plan_kvcache` (and `plan_fused` when it declares
`fused`), each given the plan's `PlanContext` and its part's metadata, each returning a `Launch`
or a `Part`: the launch plus what the plan needs of it beside running it (the library's choices
for the row, an in-place re-plan for Plan.refresh, work done once on unchanging caches for
Plan.static_kv, and what to give back when the plan is collected, such as a pooled wrapper).
Hooks then shape the plan from its parts: `plan_details` (default: the parts' details merged),
`plan_refresh` (default: none) and `plan_decisions` (default: the parts' `decide` merged).
Everything a plan holds lives in the Plan and its parts, never on the backend instance, which the
registry shares between every plan of the process.

What a backend can do is declared, not probed: `strategies`, `graph_safe` (its plans may be
captured in a CUDA graph), `graph_replay` (which other batches such a graph may be replayed on)
and `oracle` (it is the float32 reference others are checked against).

`graph_replay` answers: a graph captured on one batch, in buffers sized for a bucket under the
graphsafe `safe` recipe (Plan.refresh called before each replay, where the plan has one), is
replayed on another batch that fits the bucket; is the result right? One of GRAPH_REPLAYS:
- "any": yes, whatever the batches' mix (FA2/FA3 read every length from device memory, so the
  recipe's static upper bounds make any batch of the bucket correct; `attnbench verify` checks it);
- "decode-only": only when the capture batch and the replay batch are single-token decode batches
  (every sequence brings one query token). FlashInfer plans on host copies of the lengths and
  re-plans into the buffers a graph captured only in its CUDA-graph mode, which attnbench uses for
  such batches, as vLLM does on Hopper (FlashInferMetadataBuilder.get_cudagraph_support:
  UNIFORM_SINGLE_TOKEN_DECODE unless TRT-LLM attention serves every layer). Other batches run
  eagerly (the e2e full-graph mode) or are reported `unsupported` (verify).
- "none": never; a graph replays only the batch it was captured on (`kernel --mode graph`). flex's
  plan builds its BlockMask (the pages each query tile reads) on the host from the batch, so a
  replay on another batch reads the capture batch's pages: verify, emulated on the CPU, failed
  every safe case. e2e runs such a backend's attention eagerly (piecewise under `full`).
Replaying the capture batch itself (`kernel --mode graph`) needs only `graph_safe`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from importlib import metadata as importlib_metadata
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar

import torch

from attnbench.errors import AttnbenchError
from attnbench.kernels.backends.decisions import columns as decision_columns
from attnbench.kernels.backends.decisions import merged as merged_decisions
from attnbench.kernels.backends.launch import (Launch, Part, as_batched, as_part, on_tokens, release_when_collected,
                                               static_kv_of)
from attnbench.kernels.inputs import cache_elements
from attnbench.kernels.metadata import KVCacheMetadata, SplitMetadata, VarlenMetadata
from attnbench.kernels.workload import DEFAULT_STRATEGIES, Batch, SweepPoint

GRAPH_REPLAYS = ("any", "decode-only", "none")  # Backend.graph_replay's values (the module docstring says what each means)


@dataclass(frozen=True)
class Plan:
    """A strategy ready to run: the launches, in order, each bound to its slice of the batch."""

    backend: str
    strategy: str
    launches: tuple[Launch, ...]
    details: dict = field(default_factory=dict)  # what the library chose, recorded with each row
    # For a library whose launches read buffers its plan filled from host values (FlashInfer's
    # indptr/indices): re-plan another batch of the same shape into the same buffers, so a captured
    # graph replays on it. The e2e engine calls it before each decode-graph replay with host
    # metadata. None: the launches read the metadata tensors themselves (FA2, FA3, reference).
    refresh: Callable[[VarlenMetadata | SplitMetadata], None] | None = None
    # The caller's promise that every later run reads these caches, unchanged (the kernel sweep
    # times one batch on fixed inputs; an engine writes new K/V every layer and never calls it):
    # the plan may do once, now, work its launches would repeat on them, and says so in details
    # (FlashInfer's POD gathers its prefill's pages). None: its launches have nothing to move out.
    static_kv: Callable[[torch.Tensor, torch.Tensor], None] | None = None
    # What the library decided (decisions.DECISIONS), read when a row is written, never inside a capture
    # or a timed region: it may read device memory (FA3's scheduler metadata). From plan_decisions.
    decide: Callable[[], dict[str, str]] = dict

    def decisions(self) -> dict[str, str]:
        """The row's decision_* columns: {decision_<key>: value}, empty for a backend that decides nothing."""
        return decision_columns(self.decide())

    def run(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
            out: torch.Tensor) -> torch.Tensor:
        """Attention for the whole batch into `out` (q's shape). Launches kernels, nothing else."""
        for launch in self.launches:
            launch(q, k_cache, v_cache, out)
        return out


@dataclass(frozen=True)
class PlanContext:
    """What one plan is for, handed to each primitive beside its own part's metadata: a part's
    choices may depend on the whole batch (FlashInfer plans a decode part in CUDA-graph mode only
    when the batch has nothing else)."""

    strategy: str
    point: SweepPoint
    metadata: VarlenMetadata | SplitMetadata


class Backend(ABC):
    """A kernel family. Subclasses set the class attributes and supply the two primitives. One that
    declares `fused` also supplies `plan_fused(ctx, md: SplitMetadata)`: one launch (a Launch or a
    Part) running md's decode and prefill parts together, q/out given to it being the whole batch
    (decode tokens first), or several parts by role, each such a launch; or it plans every
    strategy itself (its own `plan`). A class that does neither is refused when it is defined."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "fused" in cls.strategies and not hasattr(cls, "plan_fused") and cls.plan is Backend.plan:
            raise TypeError(f"{cls.__name__} declares the fused strategy but neither plan_fused nor plan")
        if cls.graph_replay not in GRAPH_REPLAYS:
            raise TypeError(f"{cls.__name__}.graph_replay is {cls.graph_replay!r}, not one of {GRAPH_REPLAYS}")

    name: ClassVar[str]
    description: ClassVar[str]
    strategies: ClassVar[tuple[str, ...]] = DEFAULT_STRATEGIES
    graph_safe: ClassVar[bool] = False
    graph_replay: ClassVar[str] = "any"  # one of GRAPH_REPLAYS; meaningful where graph_safe
    oracle: ClassVar[bool] = False
    opt_in: ClassVar[bool] = False  # left out of the default backends: run only when named (--backend)
    head_dims: ClassVar[tuple[int, ...] | None] = None  # None: any
    dtypes: ClassVar[tuple[str, ...] | None] = None  # None: any
    # the largest paged K cache (elements) its CUDA kernels read right, and why (cache_refusal); None: no limit
    max_cache_elements: ClassVar[int | None] = None
    cache_limit_why: ClassVar[str] = ""

    @abstractmethod
    def unavailable_reason(self) -> str | None:
        """None when the backend can run on this machine, else why not."""

    @abstractmethod
    def library(self) -> tuple[str, str]:
        """(package that actually runs, its version)."""

    def needs_cuda(self) -> bool:
        """Whether the kernels run on CUDA only (a test's fake library may run anywhere)."""
        return False

    def supports(self, point: SweepPoint, strategy: str, device: torch.device) -> str | None:
        """None when this point can run, else the reason it can't: the declared device, head dims,
        dtypes, strategies and, on CUDA, cache size. Subclasses with other limits check them too."""
        if self.needs_cuda() and device.type != "cuda":
            return "runs on CUDA only"
        if self.head_dims is not None and point.head_dim not in self.head_dims:
            return f"--dim: {self.name} supports head dims {self.head_dims}, not {point.head_dim}"
        if self.dtypes is not None and point.dtype not in self.dtypes:
            return f"--dtype: {self.name} runs {'/'.join(self.dtypes)}, not {point.dtype}"
        if strategy not in self.strategies:
            return f"--strategy: {self.name} has no {strategy} strategy (it has {', '.join(self.strategies)})"
        if self.max_cache_elements is not None and device.type == "cuda":
            return self.cache_refusal(cache_elements(point))
        return None

    def cache_refusal(self, elements: int) -> str | None:
        """Why the kernels cannot read a paged K cache of `elements` elements (max_cache_elements), or
        None. supports() asks it of a sweep point's cache; a plan asks it of an engine's."""
        if self.max_cache_elements is None or elements <= self.max_cache_elements:
            return None
        return f"{self.name}: the paged cache spans {elements:,} K elements, {self.cache_limit_why}"

    def require_cache(self, elements: int) -> None:
        """cache_refusal as an error, for a plan over a cache it did not size (an engine's): one line."""
        if reason := self.cache_refusal(elements):
            raise AttnbenchError(reason)

    def graph_refusal(self, strategy: str) -> str | None:
        """Why `strategy` cannot be timed as a captured CUDA graph (`kernel --mode graph`), or None."""
        return None if self.graph_safe else f"{self.name} cannot be captured in a CUDA graph"

    def graph_replay_refusal(self, batch: Batch) -> str | None:
        """None when a graph this backend captured on another batch of the bucket may be replayed
        on `batch` (and one captured on `batch` replayed on others), else why not (graph_replay)."""
        if self.graph_replay == "none":
            return (f"{self.name} replays a captured graph on the batch it was captured on only (graph_replay='none': "
                    "its plan bakes that batch's page lists into the kernel's inputs)")
        if self.graph_replay == "any" or (all(batch.is_decode) and set(batch.query_lens) <= {1}):
            return None
        prefill = batch.num_seqs - batch.num_decode_seqs
        has = f"{prefill} prefill sequence(s)" if prefill else f"decode rows of {max(batch.query_lens)} query tokens"
        return (f"{self.name} replays a captured graph on single-token decode batches only "
                f"(graph_replay={self.graph_replay!r}); this batch has {has}")

    def plan(self, strategy: str, point: SweepPoint, metadata: VarlenMetadata | SplitMetadata) -> Plan:
        """Every host-side step of `strategy` for this batch, done once: its parts (plan_parts), then
        the plan that runs them, with their details, refresh, static_kv and releases."""
        if strategy not in self.strategies:
            raise ValueError(f"{self.name} has no {strategy} strategy")
        wanted = VarlenMetadata if strategy == "unified" else SplitMetadata
        if not isinstance(metadata, wanted):
            raise TypeError(f"{strategy} needs {wanted.__name__}, got {type(metadata).__name__}")
        ctx = PlanContext(strategy, point, metadata)
        parts = self.plan_parts(ctx)
        details = self.plan_details(ctx, parts)
        plan = Plan(self.name, strategy, tuple(part.launch for part in parts.values()), details,
                    self.plan_refresh(ctx, parts), static_kv_of(parts, details), self.plan_decisions(ctx, parts))
        release_when_collected(plan, parts)
        return plan

    def plan_parts(self, ctx: PlanContext) -> dict[str, Part]:
        """The strategy plumbing: the plan's parts by role, in launch order. Unified: "unified".
        Split, or fused over a batch with one part only: "decode" and/or "prefill", each launch on
        its slice of q. Fused over both parts: plan_fused's one "fused" launch, or its own parts."""
        md = ctx.metadata
        if ctx.strategy == "unified":
            return {"unified": as_part(self.plan_varlen(ctx, md))}
        dec, pre = md.decode, md.prefill
        if ctx.strategy == "fused" and dec is not None and pre is not None:
            fused = self.plan_fused(ctx, md)
            return fused if isinstance(fused, dict) else {"fused": as_part(fused)}
        parts = {}
        if dec is not None:
            part = as_part(self.plan_kvcache(ctx, dec))
            parts["decode"] = replace(part, launch=as_batched(part.launch, dec.num_seqs, dec.query_len))
        if pre is not None:
            part = as_part(self.plan_varlen(ctx, pre))
            parts["prefill"] = replace(part, launch=on_tokens(part.launch, pre.token_offset))
        return parts

    def plan_details(self, ctx: PlanContext, parts: dict[str, Part]) -> dict:
        """What the library decided for this plan (kernel variant, splits...): by default each
        part's details, merged in launch order."""
        details: dict = {}
        for part in parts.values():
            details.update(part.details)
        return details

    def plan_decisions(self, ctx: PlanContext, parts: dict[str, Part]) -> Callable[[], dict[str, str]]:
        """Plan.decide: by default each part's `decide` merged (decisions.merged); empty where no part
        decides (the reference, flex)."""
        deciders = {role: part.decide for role, part in parts.items() if part.decide is not None}
        if not deciders:
            return dict
        return lambda: merged_decisions({role: decide() for role, decide in deciders.items()})

    def plan_refresh(self, ctx: PlanContext, parts: dict[str, Part]) -> Callable | None:
        """Plan.refresh for this plan; None by default (the kernels read the metadata tensors)."""
        return None

    @abstractmethod
    def plan_varlen(self, ctx: PlanContext, md: VarlenMetadata) -> Launch | Part:
        """One paged varlen launch over md's sequences; q/out given to it are those sequences' tokens."""

    @abstractmethod
    def plan_kvcache(self, ctx: PlanContext, md: KVCacheMetadata) -> Launch | Part:
        """One batched decode launch; q/out given to it are [num_seqs, query_len, heads, dim]."""


def dist_version(dist: str) -> str:
    """An installed distribution's version, or "unknown"."""
    try:
        return importlib_metadata.version(dist)
    except importlib_metadata.PackageNotFoundError:
        return "unknown"


class LibraryBackend(Backend):
    """A backend whose kernels come from a CUDA library: the one `find_library()` locates on this
    machine, or a stand-in a test hands in (which runs anywhere: then nothing about the device is
    asked). Subclasses name the library's package and version (`describe`)."""

    graph_safe = True  # a plan of theirs only launches kernels: capturable (which batches replay: graph_replay)
    dtypes = ("bfloat16", "float16")  # the half-precision kernels these libraries ship

    def __init__(self, library: Any = None):
        self._library = library  # a test's stand-in; None: find_library()

    @abstractmethod
    def find_library(self) -> tuple[Any, str | None]:
        """The library on this machine, or None and why it does not load."""

    @abstractmethod
    def describe(self, library: Any) -> tuple[str, str]:
        """(package, version) of a found or handed-in library."""

    def lib(self) -> Any:
        """The library: the test's stand-in, else the one found; raises with the reason it is not there."""
        if self._library is not None:
            return self._library
        found, reason = self.find_library()
        if found is None:
            raise RuntimeError(reason)
        return found

    def unavailable_reason(self) -> str | None:
        if self._library is not None:
            return None
        return self.device_refusal() or self.find_library()[1]

    def device_refusal(self) -> str | None:
        """Why this machine's GPU cannot run the kernels (none visible, or older than Ampere), or None."""
        if not torch.cuda.is_available():
            return "needs a CUDA GPU (none visible)"
        major, minor = torch.cuda.get_device_capability()
        if major < 8:
            return f"{self.name} needs compute capability >= 8.0, this GPU has {major}.{minor}"
        return None

    def library(self) -> tuple[str, str]:
        found = self._library or self.find_library()[0]
        return self.describe(found) if found is not None else ("none", "")

    def needs_cuda(self) -> bool:
        return self._library is None
