"""How a series looks, decided once for every picture: colour by strategy, marker by backend.

Each figure used to colour its lines in the order it met them, so unified was blue in one PNG and
orange in the next, and two overlaid runs drew the same line twice, one hidden under the other.
Here a strategy has one colour and a backend one marker in every plot attnbench draws (kernel,
e2e, e2e --trace, replay, atlas, rule); a replay or atlas choice ("vllm-fa3 split") takes its
strategy's colour and its backend's marker; and a line that would look like one already drawn
(another run, another mode, another hit rate of the same backend and strategy) is drawn hollow,
larger and on top, so every series stays in sight.
"""

from __future__ import annotations

import zlib

from attnbench.kernels.workload import STRATEGIES

STRATEGY_COLOURS = {"unified": "tab:blue", "split": "tab:orange", "fused": "tab:green"}
SPARE_COLOURS = ("tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:red")
# registry names first, in a fixed order; any other backend (an older run's) takes a spare marker by name
BACKEND_MARKERS = {"reference": "o", "vllm-fa2": "s", "vllm-fa3": "^", "flashinfer": "D", "flashinfer-ba": "v",
                   "flex": "P", "vllm-triton": "X"}
SPARE_MARKERS = ("*", "<", ">", "h", "p", "d")
BACKEND_LINESTYLES = {"reference": "-", "vllm-fa2": ":", "vllm-fa3": "-", "flashinfer": "--", "flashinfer-ba": "-.",
                      "flex": (0, (5, 1, 1, 1)), "vllm-triton": (0, (1, 1))}
LINESTYLES = {"unified": "-", "split": "--", "fused": "-."}  # one line style per strategy, beside its colour
MARKER_SIZE = 5.0
# a replay's step kinds stack inside each choice's bar: colours no strategy has, so none reads as one
KIND_COLOURS = {"decode": "tab:cyan", "prefill": "tab:purple", "mixed": "tab:olive"}


def _spare(name: str, spares: tuple):
    return spares[zlib.crc32(name.encode()) % len(spares)]


def strategy_colour(strategy: str) -> str:
    """The colour of a strategy in every picture (any strategy outside STRATEGIES: a spare one, by name)."""
    assert set(STRATEGY_COLOURS) == set(STRATEGIES), "a new strategy needs its colour here"
    return STRATEGY_COLOURS.get(strategy) or _spare(str(strategy), SPARE_COLOURS)


def backend_marker(backend: str) -> str:
    return BACKEND_MARKERS.get(backend) or _spare(str(backend), SPARE_MARKERS)


def backend_linestyle(backend: str):
    """A choice's line style where colour already says the strategy (replay's per-step series)."""
    return BACKEND_LINESTYLES.get(backend, "-")


def kind_colour(kind: str) -> str:
    return KIND_COLOURS.get(kind) or _spare(str(kind), ("tab:gray", "tab:pink", "tab:brown"))


def split_choice(choice: str) -> tuple[str, str]:
    """'vllm-fa3 split' -> ('vllm-fa3', 'split'); a choice without a strategy is its own backend."""
    backend, _, strategy = str(choice).rpartition(" ")
    return (backend, strategy) if backend else (strategy, "")


def choice_colour(choice: str) -> str:
    return strategy_colour(split_choice(choice)[1] or choice)


class Styles:
    """Per figure: the matplotlib keywords of each named series. Colour and marker come from its
    strategy and backend alone; the k-th name that shares both with an earlier one is drawn
    hollow, larger and above it (an overlaid run, a second mode), so a series identical to another
    still shows as a ring around the other's dots."""

    def __init__(self):
        self.seen: dict[str, int] = {}
        self.counts: dict[tuple[str, str], int] = {}

    def variant(self, name: str, backend: str, strategy: str) -> int:
        if name not in self.seen:
            key = (backend, strategy)
            self.seen[name] = self.counts.get(key, 0)
            self.counts[key] = self.seen[name] + 1
        return self.seen[name]

    def __call__(self, name: str, backend: str, strategy: str, linestyle=None) -> dict:
        k = self.variant(name, backend, strategy)
        return {"color": strategy_colour(strategy), "marker": backend_marker(backend), "label": name,
                "linestyle": LINESTYLES.get(strategy, ":") if linestyle is None else linestyle,
                "markersize": MARKER_SIZE + 3 * k, "fillstyle": "full" if k == 0 else "none",
                "markeredgewidth": 1.0 + 0.3 * k, "zorder": 3 + k, "alpha": 1.0 if k == 0 else 0.9}

    def choice(self, choice: str, name: str | None = None, markevery=None) -> dict:
        """A replay or atlas choice ('backend strategy'): its strategy's colour, its backend's marker."""
        backend, strategy = split_choice(choice)
        style = self(name or choice, backend, strategy, linestyle=backend_linestyle(backend))
        return {**style, "markevery": markevery} if markevery is not None else style
