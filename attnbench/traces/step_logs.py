"""Aggregate step logs: the per-step lines SGLang and vLLM write, read as counts.

Why a reader of counts only: neither engine logs a request's lengths per step, only the step's
totals, so this module reads what the line says (how many prefill and decode requests, their new
tokens, prefix-cache hits, KV tokens in use) into a `LogStep`; log_steps.py draws the missing
per-request lengths. The line formats, from the engines' sources (docs/guides/traces.md cites the
files and commits):

- SGLang's scheduler, at INFO: `Prefill batch. #new-seq: 2, #new-token: 900, #cached-token: 100,
  ...` (`Prefill batch, ` and `Prefill batch [N], ` in newer versions; `Prefill batch(mixed
  #running-req: 3). ` in older ones, whose decode requests ran in the same step) and `Decode batch.
  #running-req: 40, #token: 51234, ...` (`#full token:` on hybrid models). A decode line is written
  every `--decode-log-interval` decode steps (40 by default), so it is a sample of the decode steps.
- vLLM V1 with `--enable-logging-iteration-details`: `Iteration(N): 2 context requests, 900 context
  tokens, 40 generation requests, 40 generation tokens, iteration elapsed time: 31.20 ms`, one line
  per engine step (a context request is a prefill or a chunk of one); `(dummy)` lines of data-parallel
  padding hold no request.

Other lines are ignored and counted; a known line with a bad number is one error naming the file,
the line and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from attnbench.errors import UsageError
from attnbench.kernels.workload import MAX_CONTEXT, MAX_TOKENS
from attnbench.traces.files import numbered_lines, where
from attnbench.traces.steps import MAX_REQUESTS, FieldError

# A serving log holds many lines that are not steps (requests, throughput, HTTP); it is read line
# by line and only the steps are kept, so it may be larger than a trace file.
MAX_LOG_BYTES = 1 << 30
MAX_LOG_LINE = 1 << 16  # a step line is a few hundred bytes; a longer line is not one


@dataclass(frozen=True)
class LogStep:
    """What one log line says of one engine step. `kv_tokens`: KV tokens the running requests hold
    (SGLang's decode `#token`), when the line has it."""

    line: int
    prefill_requests: int = 0
    prefill_tokens: int = 0
    cached_tokens: int = 0
    decode_requests: int = 0
    decode_tokens: int = 0
    kv_tokens: int | None = None

    @property
    def empty(self) -> bool:
        return self.prefill_requests + self.decode_requests == 0


@dataclass(frozen=True)
class LogRead:
    """A log's steps, and how many of its lines were something else."""

    steps: list[LogStep]
    lines: int
    ignored: int
    empty: int


def number(text: str, name: str, high: int) -> int:
    """A count the log printed, or a FieldError naming the log's own field."""
    if not text.isdigit() or not text.isascii():
        raise FieldError(name, f"expected a whole number, got {text[:40]!r}")
    value = int(text)
    if value > high:
        raise FieldError(name, f"must be at most {high}, got {text[:40]}")
    return value


def fields(text: str) -> dict[str, str]:
    """`#new-seq: 2, #new-token: 900, token usage: 0.01, ` -> {"#new-seq": "2", ...}."""
    out = {}
    for part in text.split(","):
        name, colon, value = part.partition(":")
        if colon:
            out[name.strip()] = value.strip()
    return out


SGLANG = re.compile(r"\b(Prefill|Decode) batch(?:\(mixed #running-req: (\S*?)\))?(?: \[\d+\])?[.,] (.*)")


def sglang_step(match: re.Match, line: int) -> LogStep:
    """One SGLang batch line as a step. A prefill step holds its new requests (and, in the old
    mixed format, the running decode requests); a decode step holds every running request."""
    kind, mixed, rest = match.groups()
    values = fields(rest)

    def need(name: str, high: int, default: str | None = None) -> int:
        if name not in values and default is None:
            raise FieldError(name, "missing from the batch line")
        return number(values.get(name, default), name, high)

    if kind == "Prefill":
        decode = number(mixed, "mixed #running-req", MAX_REQUESTS) if mixed is not None else 0
        return LogStep(line, need("#new-seq", MAX_REQUESTS), need("#new-token", MAX_TOKENS),
                       need("#cached-token", MAX_CONTEXT * MAX_REQUESTS, "0"), decode, decode)
    running = need("#running-req", MAX_REQUESTS)
    kv_name = "#token" if "#token" in values else "#full token"
    kv = number(values[kv_name], kv_name, MAX_CONTEXT * MAX_REQUESTS) if kv_name in values else None
    return LogStep(line, decode_requests=running, decode_tokens=running, kv_tokens=kv)


VLLM = re.compile(r"\bIteration\((\d+)\): (\S+) context requests, (\S+) context tokens, (\S+) generation "
                  r"requests, (\S+) generation tokens(.*)")


def vllm_step(match: re.Match, line: int) -> LogStep:
    """One vLLM iteration line as a step: its context (prefill) and generation (decode) rows."""
    _, ctx_reqs, ctx_tokens, gen_reqs, gen_tokens, tail = match.groups()
    if "(dummy)" in tail:  # data-parallel padding: a step of no request
        return LogStep(line)
    return LogStep(line, number(ctx_reqs, "context requests", MAX_REQUESTS),
                   number(ctx_tokens, "context tokens", MAX_TOKENS), 0,
                   number(gen_reqs, "generation requests", MAX_REQUESTS),
                   number(gen_tokens, "generation tokens", MAX_TOKENS))


ENGINES = {"sglang": (SGLANG, sglang_step, "SGLang `Prefill batch` / `Decode batch`"),
           "vllm": (VLLM, vllm_step, "vLLM `Iteration(N): ... context requests` (--enable-logging-iteration-details)")}


def check_counts(step: LogStep) -> None:
    """Counts that no step can have: fewer tokens than the requests that bring them."""
    if step.prefill_tokens < step.prefill_requests:
        raise FieldError("new tokens", f"{step.prefill_tokens} tokens for {step.prefill_requests} prefill "
                         "requests; each brings at least one")
    if step.decode_tokens < step.decode_requests:
        raise FieldError("generation tokens", f"{step.decode_tokens} tokens for {step.decode_requests} "
                         "decode requests; each brings at least one")
    if step.kv_tokens is not None and step.kv_tokens > MAX_CONTEXT * max(step.decode_requests, 1):
        raise FieldError("#token", f"{step.kv_tokens} KV tokens for {step.decode_requests} requests is past "
                         f"{MAX_CONTEXT} a request")


def read_log(path: Path, engine: str) -> LogRead:
    """Every step line of an engine's log, in order; a known line that does not read is an error."""
    path, (pattern, parse, known) = Path(path), ENGINES[engine]
    steps, total, empty = [], 0, 0
    for number_, text in numbered_lines(path, f"{engine} log", MAX_LOG_BYTES):
        total += 1
        match = pattern.search(text[:MAX_LOG_LINE])
        if match is None:
            continue
        try:
            step = parse(match, number_)
            check_counts(step)
        except FieldError as exc:
            raise UsageError(f"{where(path, number_)}: {exc}") from None
        if step.empty:
            empty += 1
        else:
            steps.append(step)
    if not steps:
        raise UsageError(f"{path}: no {known} line with a request in {total} lines (is this a {engine} log, "
                         "written at INFO level?)")
    return LogRead(steps, total, total - len(steps) - empty, empty)
