"""What a plan is made of: launches, the parts they come in, and the adapters that bind a launch
to its slice of the batch. base.Backend.plan assembles a Plan from a backend's parts with these.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from attnbench.kernels.metadata import KVCacheMetadata, VarlenMetadata

# one kernel launch: reads q (or its 4-D view) and the paged caches, writes into out
Launch = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]
# re-plans a part, in place, for its share of another batch's host metadata (Plan.refresh)
Replan = Callable[[VarlenMetadata | KVCacheMetadata], None]
# work done once on caches every later launch reads unchanged (Plan.static_kv); returns details to record
StaticKV = Callable[[torch.Tensor, torch.Tensor], dict]
# what the library decided for a part, keys of decisions.DECISIONS (Backend.plan_decisions says when it runs)
Decide = Callable[[], dict]


@dataclass(frozen=True)
class Part:
    """One planned launch over some of the batch's sequences, and what its plan needs of it beside
    running it. A primitive returning a bare Launch returns a Part with nothing else."""

    launch: Launch
    details: dict = field(default_factory=dict)  # what the library chose for this part
    replan: Replan | None = None  # in place, for Plan.refresh (a backend's plan_refresh uses it)
    static_kv: StaticKV | None = None  # its share of Plan.static_kv
    release: Callable[[], None] | None = None  # called once the plan is collected (a pooled wrapper goes back)
    decide: Decide | None = None  # its decisions (decision_* columns); None: it decides nothing


def as_part(planned: Launch | Part) -> Part:
    return planned if isinstance(planned, Part) else Part(planned)


def on_tokens(launch: Launch, start: int, stop: int | None = None) -> Launch:
    """The launch over q[start:stop] / out[start:stop]: the varlen part of a split batch (to its end),
    or some prefill requests inside it (FlashInfer's POD runs the others)."""
    if start == 0 and stop is None:
        return launch

    def run(q, k_cache, v_cache, out):
        launch(q[start:stop], k_cache, v_cache, out[start:stop])
    return run


def as_batched(launch: Launch, num_seqs: int, query_len: int) -> Launch:
    """The launch over q[:num_seqs * query_len] viewed as [num_seqs, query_len, heads, dim]."""
    num_tokens = num_seqs * query_len

    def run(q, k_cache, v_cache, out):
        shape = (num_seqs, query_len, q.shape[1], q.shape[2])
        launch(q[:num_tokens].view(shape), k_cache, v_cache, out[:num_tokens].view(shape))
    return run


def static_kv_of(parts: dict[str, Part], details: dict) -> Callable[[torch.Tensor, torch.Tensor], None] | None:
    """Plan.static_kv of a plan of these parts: each part that can do work once on unchanging caches
    does it, and what it did lands in the plan's details. None when no part can."""
    hoists = [part.static_kv for part in parts.values() if part.static_kv is not None]
    if not hoists:
        return None

    def static_kv(k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
        for hoist in hoists:
            details.update(hoist(k_cache, v_cache))
    return static_kv


def release_when_collected(plan: object, parts: dict[str, Part]) -> None:
    """Once `plan` is collected, its parts give back what they hold (Part.release), in order. The
    callback holds the releases only, never the plan, so it cannot keep the plan alive."""
    releases = [part.release for part in parts.values() if part.release is not None]
    if releases:
        weakref.finalize(plan, _call_each, releases).atexit = False


def _call_each(calls: list[Callable[[], None]]) -> None:
    for call in calls:
        call()
