"""The e2e engine's CUDA graph modes, and the one place that decides what a backend runs under one.

Why a module of its own, without torch: the mode is one type from the command line to the capture
(`--cudagraph` -> E2EArgs.cudagraph -> GraphChoice.cudagraph -> Engine), and the CLI imports it.
What a backend's rows run under the requested mode, and why, is decided once, by `choose_graphs`:
the CPU falls back to eager; a backend that cannot be captured runs eagerly; one whose captured
graphs replay only the batch they were captured on (graph_replay "none": flex) runs piecewise under
`full` and eagerly under `decode`; one whose graphs replay on pure-decode batches only
(graph_replay "decode-only": FlashInfer) runs `full` as decode graphs for its decode steps and
piecewise graphs for its prefill and mixed steps, as vLLM's FULL_AND_PIECEWISE mode does. The job
writes its answer into every row (cudagraph, graph_note); the engine builds the graphs it names.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from attnbench.errors import UsageError


class GraphMode(str, enum.Enum):
    """--cudagraph's values; str-valued, so rows and env.json keep writing the same text (a str mixin
    rather than enum.StrEnum, which Python 3.10 lacks)."""

    NONE = "none"  # every step eager
    DECODE = "decode"  # decode steps replay decode graphs (decode_graphs.py); prefill and mixed steps eager
    PIECEWISE = "piecewise"  # every step replays graphs of all but attention (piecewise.py)
    FULL = "full"  # every step replays a graph bucketed over tokens and sequences (graphs.py)

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: str | None) -> GraphMode | None:
        """The mode a --cudagraph value names (None: not given); an unknown one is a one-line refusal."""
        if value is None or isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            raise UsageError(f"--cudagraph: unknown mode {value!r}; choose from {', '.join(cls)}") from None


DEFAULT_MODE = GraphMode.FULL  # decode until full was measured (issue 11); runs from before record decode
GRAPH_NOTE = "decode steps replay CUDA graphs (buckets {buckets}); prefill and mixed steps run eagerly"
FULL_NOTE = "every step replays a CUDA graph ({policy} policy; buckets over tokens and sequences, captured on first use)"
DECODE_ONLY_NOTE = ("decode steps replay decode CUDA graphs (buckets {buckets}); prefill and mixed steps run piecewise "
                    "(attention eager, {segments} graphs per token bucket): the {backend} backend's captured graphs "
                    "replay on pure-decode batches only (graph_replay); --graph-policy does not apply")
NO_REPLAY_NOTE = (": the {backend} backend's captured graphs replay only the batch they were captured on "
                  "(graph_replay='none')")
PIECEWISE_NOTE = ("every step replays piecewise CUDA graphs (all but attention, {segments} per token bucket, captured "
                  "on first use); attention runs eagerly between them on the step's real tokens")


def cudagraph_of(args) -> GraphMode:
    """The requested mode of an E2EArgs: --cudagraph, or none under --eager; not given, DEFAULT_MODE
    (under --tp too: each rank captures its own graphs, NCCL all-reduces inside)."""
    if args.eager:
        return GraphMode.NONE
    return args.cudagraph or DEFAULT_MODE


def graph_buckets(max_num_seqs: int) -> list[int]:
    """nano-vllm's batch buckets: 1, 2, 4, 8, then every 16, up to max_num_seqs (always included)."""
    buckets = [b for b in [1, 2, 4, 8, *range(16, max_num_seqs + 1, 16)] if b <= max_num_seqs]
    return buckets if buckets[-1] == max_num_seqs else buckets + [max_num_seqs]


class Capturable(Protocol):
    """What choose_graphs reads of a backend (kernels.backends.base.Backend declares it)."""

    name: str
    graph_safe: bool
    graph_replay: str  # base.GRAPH_REPLAYS: "any", "decode-only" or "none"


@dataclass(frozen=True)
class GraphChoice:
    """What a backend's rows run under the requested mode and why (the rows' cudagraph and
    graph_note), and which graphs its engines hold: decode graphs replay decode steps, full graphs
    every step, piecewise graphs every step that no other graph replays."""

    cudagraph: GraphMode
    note: str
    decode: bool = False
    full: bool = False
    piecewise: bool = False


def choose_graphs(backend: Capturable, requested: GraphMode, device_type: str, max_num_seqs: int, n_layer: int = 0,
                  policy: str = "safe", none_by: str = "--cudagraph none") -> GraphChoice:
    """What runs for `backend` under `requested` on a device of `device_type`. Piecewise never
    captures attention, so any backend runs it. max_num_seqs: the decode buckets' largest (the
    note); n_layer: the model's layers (the note's segments); none_by: the flag that asked for no
    graphs (--eager or --cudagraph none)."""
    if requested == GraphMode.NONE:
        return GraphChoice(GraphMode.NONE, f"eager ({none_by})")
    if device_type != "cuda":
        return GraphChoice(GraphMode.NONE, f"eager: CUDA graphs need a GPU (this run is on {device_type})")
    segments = n_layer + 1 if n_layer else "n_layer + 1"
    piecewise = PIECEWISE_NOTE.format(segments=segments)
    if requested == GraphMode.PIECEWISE:
        return GraphChoice(GraphMode.PIECEWISE, piecewise, piecewise=True)
    if not backend.graph_safe:
        return GraphChoice(GraphMode.NONE, f"eager: the {backend.name} backend cannot be captured in a CUDA graph")
    if backend.graph_replay == "none":  # no graph of it replays another batch (base.py)
        no_replay = NO_REPLAY_NOTE.format(backend=backend.name)
        if requested == GraphMode.FULL:
            return GraphChoice(GraphMode.PIECEWISE, piecewise + no_replay, piecewise=True)
        return GraphChoice(GraphMode.NONE, "eager" + no_replay)
    buckets = ",".join(map(str, graph_buckets(max_num_seqs)))
    if requested == GraphMode.DECODE:
        return GraphChoice(GraphMode.DECODE, GRAPH_NOTE.format(buckets=buckets), decode=True)
    if backend.graph_replay == "decode-only":
        note = DECODE_ONLY_NOTE.format(buckets=buckets, segments=segments, backend=backend.name)
        return GraphChoice(GraphMode.FULL, note, decode=True, piecewise=True)
    return GraphChoice(GraphMode.FULL, FULL_NOTE.format(policy=policy), full=True)
