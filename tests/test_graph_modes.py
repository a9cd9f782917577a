"""The e2e graph modes (attnbench/e2e/modes.py), on the CPU: what modes.choose_graphs decides for
each kind of backend, requested mode and device, as a table over fake backends (what runs, which
graphs the engine holds, why); the --cudagraph text becoming a GraphMode, with a one-line refusal;
and modes.py importing no torch, so that the CLI can import it."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest

from attnbench.e2e.modes import DEFAULT_MODE, GraphChoice, GraphMode, choose_graphs
from attnbench.errors import UsageError

NONE, DECODE, PIECEWISE, FULL = GraphMode


@dataclass(frozen=True)
class FakeBackend:
    """What choose_graphs reads of a backend."""

    name: str
    graph_safe: bool = True
    graph_replay: str = "any"


ANY = FakeBackend("fake-any")  # FA2 / FA3
DECODE_ONLY = FakeBackend("fake-decode-only", graph_replay="decode-only")  # FlashInfer
NO_REPLAY = FakeBackend("fake-no-replay", graph_replay="none")  # flex
UNSAFE = FakeBackend("fake-unsafe", graph_safe=False)  # the reference

# what runs on a GPU under decode, piecewise and full, and the graphs its engines then hold
ON_A_GPU = {
    ANY: ((DECODE, "decode"), (PIECEWISE, "piecewise"), (FULL, "full")),
    DECODE_ONLY: ((DECODE, "decode"), (PIECEWISE, "piecewise"), (FULL, "decode piecewise")),  # FULL_AND_PIECEWISE
    NO_REPLAY: ((NONE, ""), (PIECEWISE, "piecewise"), (PIECEWISE, "piecewise")),
    UNSAFE: ((NONE, ""), (PIECEWISE, "piecewise"), (NONE, "")),  # piecewise leaves attention out of its graphs
}
GPU_CASES = [(backend, requested, *want) for backend, row in ON_A_GPU.items()
             for requested, want in zip((DECODE, PIECEWISE, FULL), row)]
WHY = [  # a phrase of the rows' graph_note
    (ANY, DECODE, "decode steps replay CUDA graphs (buckets 1,2,4,8,16,20); prefill and mixed steps run eagerly"),
    (ANY, PIECEWISE, "all but attention, 3 per token bucket"),
    (DECODE_ONLY, FULL, "the fake-decode-only backend's captured graphs replay on pure-decode batches only"),
    (NO_REPLAY, FULL, "3 per token bucket, captured on first use); attention runs eagerly between them on the step's "
                      "real tokens: the fake-no-replay backend's captured graphs replay only the batch they were "
                      "captured on (graph_replay='none')"),
    (UNSAFE, FULL, "eager: the fake-unsafe backend cannot be captured in a CUDA graph"),
]


def held(choice: GraphChoice) -> str:
    """The graphs an engine holds for this choice."""
    return " ".join(kind for kind in ("decode", "full", "piecewise") if getattr(choice, kind))


@pytest.mark.parametrize("backend, requested, runs, graphs", GPU_CASES,
                         ids=[f"{b.name}-{r}" for b, r, *_ in GPU_CASES])
def test_what_runs_on_a_gpu_for_each_kind_of_backend(backend, requested, runs, graphs):
    choice = choose_graphs(backend, requested, "cuda", max_num_seqs=20, n_layer=2)
    assert choice.cudagraph is runs and held(choice) == graphs, choice
    if runs == FULL and graphs == "full":
        assert choice.note.startswith("every step replays a CUDA graph (safe policy"), choice.note


@pytest.mark.parametrize("backend", ON_A_GPU, ids=lambda b: b.name)
@pytest.mark.parametrize("requested", GraphMode)
def test_no_gpu_or_no_graphs_asked_is_eager_with_the_reason(backend, requested):
    for device in ("cpu", "cuda"):
        choice = choose_graphs(backend, requested, device, 20, 2)
        why = "eager (--cudagraph none)" if requested is NONE else "eager: CUDA graphs need a GPU (this run is on cpu)"
        if device == "cpu" or requested is NONE:
            assert choice.cudagraph is NONE and held(choice) == "" and choice.note == why, choice


@pytest.mark.parametrize("backend, requested, phrase", WHY, ids=[f"{b.name}-{r}" for b, r, _ in WHY])
def test_the_note_says_why(backend, requested, phrase):
    assert phrase in choose_graphs(backend, requested, "cuda", 20, 2).note


def test_a_choice_is_its_own_answer():
    """The engine asks again with the mode the job chose: it must get the same mode and graphs (the
    note may differ: it says why a fallback happened, and the second question has none)."""
    for backend, requested, *_ in GPU_CASES:
        choice = choose_graphs(backend, requested, "cuda", 20, 2)
        again = choose_graphs(backend, choice.cudagraph, "cuda", 20, 2)
        assert (again.cudagraph, held(again)) == (choice.cudagraph, held(choice)), choice


def test_the_flag_that_asked_for_no_graphs_is_named():
    assert choose_graphs(ANY, NONE, "cuda", 4, none_by="--eager") == GraphChoice(NONE, "eager (--eager)")
    assert "naive policy" in choose_graphs(ANY, FULL, "cuda", 4, policy="naive").note


def test_cli_text_becomes_the_mode_and_rows_keep_their_text():
    assert [GraphMode.parse(t) for t in ("none", "decode", "piecewise", "full")] == list(GraphMode)
    assert GraphMode.parse(None) is None and GraphMode.parse(FULL) is FULL and DEFAULT_MODE is FULL
    assert [f"{m}" for m in GraphMode] == [m.value for m in GraphMode] == ["none", "decode", "piecewise", "full"]
    with pytest.raises(UsageError, match=r"^--cudagraph: unknown mode 'fast'; choose from none, decode, piecewise, "
                                         r"full$"):
        GraphMode.parse("fast")


def test_modes_import_no_torch():
    code = "import sys, attnbench.e2e.modes; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0, "attnbench.e2e.modes imported torch"
