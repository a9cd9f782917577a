"""Request traces: when each request arrives and how many tokens it brings and asks for.

Why: a serving workload is known as requests, not steps; scheduler.py turns them into steps. Read:
- vLLM's timed trace JSON Lines, one request a line: `timestamp`, `input_length`, `output_length`
  (other keys, such as Mooncake's `hash_ids`, are ignored; `prefix_length`, attnbench's own, gives
  the prompt tokens a prefix cache holds). Timestamps in seconds, or `time_unit="ms"`.
- a BurstGPT-style CSV: `Timestamp` (seconds), `Request tokens`, `Response tokens`; rows with no
  response tokens (failed requests in BurstGPT's logs) are skipped and counted.
- `synthesize`: lengths from stated distributions (LengthDist), Poisson arrivals at a rate, a seed.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from attnbench.errors import UsageError
from attnbench.kernels.workload import MAX_CONTEXT
from attnbench.traces.files import json_line, numbered_lines, read_text, where
from attnbench.traces.steps import FieldError, count

MAX_REQUESTS = 1_000_000  # requests of one trace: each one is simulated step by step
TIME_UNITS = {"s": 1.0, "ms": 1e-3}


def seconds(value, name: str) -> float:
    """A time >= 0 as a finite float; an integer past a float's range (JSON allows any digits) is refused too."""
    try:
        finite = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    except OverflowError:  # math.isfinite(10**400)
        finite = False
    if not finite or value < 0:
        shown = "an integer past a float's range" if isinstance(value, int) and not finite else repr(value)
        raise FieldError(name, f"expected a finite number >= 0, got {shown}")
    return float(value)


@dataclass(frozen=True)
class TimedRequest:
    """One request: `arrival` seconds after the trace starts, a prompt of `input_len` tokens whose
    first `prefix_len` a prefix cache already holds, and `output_len` tokens to generate."""

    arrival: float
    input_len: int
    output_len: int
    prefix_len: int = 0

    def __post_init__(self) -> None:
        seconds(self.arrival, "timestamp")
        count(self.input_len, "input_length", 1, MAX_CONTEXT)
        count(self.output_len, "output_length", 1, MAX_CONTEXT - self.input_len + 1)
        count(self.prefix_len, "prefix_length", 0, self.input_len)


def _from_start(requests: list[TimedRequest], path: Path, scale: float = 1.0) -> list[TimedRequest]:
    """Sorted by arrival, the first at 0, in seconds (`scale`: seconds per unit of the file)."""
    if not requests:
        raise UsageError(f"{path}: holds no request")
    requests.sort(key=lambda r: r.arrival)
    start = requests[0].arrival
    return [TimedRequest((r.arrival - start) * scale, r.input_len, r.output_len, r.prefix_len) for r in requests]


def _too_many(path: Path, number: int) -> UsageError:
    return UsageError(f"{where(path, number)}: more than {MAX_REQUESTS} requests; keep fewer")


def read_timed(path: Path, time_unit: str = "s") -> list[TimedRequest]:
    """vLLM's timed trace JSON Lines -> requests, in arrival order from 0."""
    path, scale, requests = Path(path), TIME_UNITS[time_unit], []
    for number, text in numbered_lines(path, "request trace"):
        value = json_line(path, number, text)
        try:
            for name in ("timestamp", "input_length", "output_length"):
                if name not in value:
                    raise FieldError(name, "missing")
            requests.append(TimedRequest(seconds(value["timestamp"], "timestamp"), value["input_length"],
                                         value["output_length"], value.get("prefix_length", 0)))
        except FieldError as exc:
            raise UsageError(f"{where(path, number)}: {exc}") from None
        if len(requests) > MAX_REQUESTS:
            raise _too_many(path, number)
    return _from_start(requests, path, scale)


BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


def _number(row: dict, name: str, integer: bool = True):
    """A cell as a number (an integer for token counts: `12.0` reads as 12), or a FieldError."""
    try:
        value = float(row[name])
    except (TypeError, ValueError):
        raise FieldError(name, f"expected a number, got {row[name]!r}") from None
    if not integer:
        return seconds(value, name)
    if not value.is_integer():
        raise FieldError(name, f"expected a whole number of tokens, got {row[name]!r}")
    return count(int(value), name, 0, MAX_CONTEXT)


def _burst_row(row: dict) -> TimedRequest | None:
    """One BurstGPT row -> a request, or None for a failed one (no response tokens)."""
    arrival, prompt, response = (_number(row, BURSTGPT_COLUMNS[0], integer=False),
                                 _number(row, BURSTGPT_COLUMNS[1]), _number(row, BURSTGPT_COLUMNS[2]))
    if response == 0:
        return None
    count(prompt, BURSTGPT_COLUMNS[1], 1, MAX_CONTEXT)
    return TimedRequest(arrival, prompt, response)


def read_burstgpt(path: Path) -> tuple[list[TimedRequest], int]:
    """A BurstGPT-style CSV -> (requests in arrival order from 0, rows skipped for no response)."""
    path = Path(path)
    text = read_text(path, "request trace")
    if "\x00" in text:
        raise UsageError(f"{path}: a NUL byte (is this a CSV file?)")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        missing = [c for c in BURSTGPT_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise UsageError(f"{path}:1: {missing[0]}: missing column; a BurstGPT CSV has "
                             f"{', '.join(BURSTGPT_COLUMNS)}")
        requests, skipped = [], 0
        for row in reader:
            try:
                request = _burst_row(row)
            except FieldError as exc:
                raise UsageError(f"{where(path, reader.line_num)}: {exc}") from None
            skipped += request is None
            requests += [request] if request else []
            if len(requests) > MAX_REQUESTS:
                raise _too_many(path, reader.line_num)
    except csv.Error as exc:
        raise UsageError(f"{where(path, reader.line_num)}: not CSV ({exc})") from None
    return _from_start(requests, path), skipped


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution: `N`, `uniform:LOW:HIGH`, or `lognormal:MEDIAN:SIGMA` (the
    log of the length is normal around log(MEDIAN) with deviation SIGMA; rounded, clipped to
    [1, MAX_CONTEXT])."""

    kind: str
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, text: str, flag: str) -> LengthDist:
        parts = str(text).strip().split(":")
        try:
            if len(parts) == 1:
                dist = cls("const", int(parts[0]))
            elif parts[0] in ("uniform", "lognormal") and len(parts) == 3:
                cast = int if parts[0] == "uniform" else float
                dist = cls(parts[0], cast(parts[1]), float(parts[2]) if cast is float else int(parts[2]))
            else:
                raise ValueError
        except ValueError:
            raise UsageError(f"{flag}: expected N, uniform:LOW:HIGH or lognormal:MEDIAN:SIGMA "
                             f"(e.g. lognormal:600:0.8), got {text!r}") from None
        ok = {"const": lambda: 1 <= dist.a <= MAX_CONTEXT,
              "uniform": lambda: 1 <= dist.a <= dist.b <= MAX_CONTEXT,
              "lognormal": lambda: 1 <= dist.a <= MAX_CONTEXT and 0 <= dist.b <= 4}[dist.kind]
        if not ok():
            raise UsageError(f"{flag}: lengths within [1, {MAX_CONTEXT}] (a lognormal SIGMA within [0, 4]), "
                             f"got {text!r}")
        return dist

    def __str__(self) -> str:
        return {"const": f"{self.a}", "uniform": f"uniform:{self.a}:{self.b}",
                "lognormal": f"lognormal:{self.a:g}:{self.b:g}"}[self.kind]

    def draw(self, rng: random.Random) -> int:
        if self.kind == "const":
            return int(self.a)
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        return min(MAX_CONTEXT, max(1, round(self.a * math.exp(rng.gauss(0.0, self.b)))))


def synthesize(num_requests: int, rate: float, input_len: LengthDist, output_len: LengthDist,
               prefix_len: int = 0, prefix_share: float = 0.0, seed: int = 0) -> list[TimedRequest]:
    """Requests with Poisson arrivals at `rate` per second (0: all at once); a `prefix_share` of them
    start with `prefix_len` tokens a prefix cache holds (a shared system prompt). Seeded: the same
    arguments give the same requests on every machine."""
    rng, clock, out = random.Random(seed), 0.0, []
    for i in range(num_requests):
        if rate > 0 and i > 0:
            clock += rng.expovariate(rate)
        prompt, generated = input_len.draw(rng), output_len.draw(rng)
        shared = rng.random() < prefix_share
        out.append(TimedRequest(round(clock, 6), prompt, min(generated, MAX_CONTEXT - prompt + 1),
                                min(prefix_len, prompt) if shared else 0))
    return out


def timed_text(requests: list[TimedRequest]) -> str:
    """Requests as vLLM's timed trace JSON Lines (seconds), `prefix_length` where a prefix is cached."""
    lines = []
    for r in requests:
        value = {"timestamp": r.arrival, "input_length": r.input_len, "output_length": r.output_len}
        if r.prefix_len:
            value["prefix_length"] = r.prefix_len
        lines.append(json.dumps(value) + "\n")
    return "".join(lines)
