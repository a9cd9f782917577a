"""Readers of the exact batch shapes vLLM's benchmarks take: each case or spec becomes one step.

- `vllm bench forward --case NAME=REQS` (vLLM's exact-batch model benchmark): REQS is a comma list
  of `[N*]Q[@K][c][:D]`, N requests of Q query tokens on K keys including the query (default Q),
  D draft tokens among the Q; a prefill's prefix (K - Q) is a prefix-cache hit unless `c` marks a
  chunked prefill. The grammar and its meaning are those of the command's help as vLLM publishes
  it (docs.vllm.ai/en/latest/cli/bench/forward/; v0.33.0's benchmarking/cli page points to the
  command); its parser (vllm/entrypoints/cli/benchmark/, vllm/benchmarks/) was not in the copies
  of vLLM's source searched here, so the code below is written from that help.
- A batch-shapes file (`--shapes`, JSON, or YAML when pyyaml is installed): attnbench's own schema,
  `{"cases": [{"name": ..., "requests": [{"query_len", "kv_len", "num_draft_tokens", "chunked",
  "prefix_hit", "count"}]}]}`; kv_len defaults to query_len (a prefill), the others to 0, false,
  0 and 1. `vllm bench forward --shapes` takes "a JSON or YAML file with cases" too, but vLLM's
  published help gives no schema, so a file written for vLLM is not known to read here.
- attention_benchmarks' batch specs (vLLM benchmarks/attention_benchmarks/batch_spec.py):
  `(<count>)q<q_len>[k][kv<kv_len>[k]]`, segments joined by `_`, `k` multiplying by 1024; the file
  there now writes `s<seq_len>` for `kv<kv_len>` (same meaning), and both are read.
The grammars of --case and the batch specs are vLLM's; the code is attnbench's own.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from attnbench.errors import UsageError
from attnbench.traces.files import base_suffix, read_text
from attnbench.traces.steps import MAX_REQUESTS, FieldError, Request, TraceStep, check_rows, count

# at most 9 digits a number: int() of a longer one is past every bound anyway (and of thousands, slow)
CASE = re.compile(r"(?:(\d{1,9})\*)?(\d{1,9})(?:@(\d{1,9}))?(c)?(?::(\d{1,9}))?")
SPEC = re.compile(r"(\d{1,9})?q(\d{1,9})(k?)(?:(?:kv|s)(\d{1,9})(k?))?")
REQUEST_KEYS = ("query_len", "kv_len", "num_draft_tokens", "chunked", "prefix_hit", "count")


def expand(groups: list[tuple[int, Request]]) -> TraceStep:
    """(count, request) groups -> one step, refusing a total past MAX_REQUESTS before building it."""
    total = sum(n for n, _ in groups)
    if not 1 <= total <= MAX_REQUESTS:
        raise FieldError("count", f"a step holds 1 to {MAX_REQUESTS} requests, got {total}")
    return TraceStep(tuple(request for n, request in groups for _ in range(n)))


def case_request(query_len: int, kv_len: int, drafts: int, chunked: bool) -> Request:
    """One request of a --case: as vLLM's help reads it, the prefix of a prefill (a row that is
    neither a decode or verify row, 1 + D query tokens, nor a chunk) is a prefix-cache hit."""
    prefill = not chunked and query_len != 1 + drafts
    return Request(query_len, kv_len, num_draft_tokens=drafts, chunked=chunked,
                   prefix_hit=max(kv_len - query_len, 0) if prefill else 0)


def parse_case(text: str) -> tuple[str, TraceStep]:
    """`NAME=[N*]Q[@K][c][:D],...` -> (name, step); a bad part is one error naming the flag and the part."""
    name, sep, body = str(text).partition("=")
    if not sep or not name.strip() or not body.strip():
        raise UsageError(f"--case: expected NAME=[N*]Q[@K][c][:D] (e.g. mix=32*1@2048,512@1024c), got {text!r}")
    groups = []
    for part in body.split(","):
        match = CASE.fullmatch(part.strip())
        if not match:
            raise UsageError(f"--case: {name}: {part!r} is not [N*]Q[@K][c][:D] (e.g. 32*1@2048)")
        n, q, k, chunked, drafts = match.groups()
        try:
            groups.append((count(int(n or 1), "count", 1, MAX_REQUESTS), case_request(
                int(q), int(k or q), int(drafts or 0), bool(chunked))))
        except FieldError as exc:
            raise UsageError(f"--case: {name}: {part!r}: {exc}") from None
    try:
        return name.strip(), expand(groups)
    except FieldError as exc:
        raise UsageError(f"--case: {name}: {exc}") from None


def _size(digits: str, kilo: str) -> int:
    return int(digits) * (1024 if kilo else 1)


def parse_batch_spec(text: str) -> TraceStep:
    """`2q2k_32q1kv1k` -> one step (2 prefills of 2048 tokens, 32 decodes on 1024 keys)."""
    groups = []
    for segment in str(text).split("_"):
        match = SPEC.fullmatch(segment.strip())
        if not match:
            raise UsageError(f"--batch-spec: {text!r}: segment {segment!r} is not "
                             "(<count>)q<q_len>[k][kv<kv_len>[k]] (e.g. 32q1kv1k)")
        n, q, q_kilo, kv, kv_kilo = match.groups()
        query_len = _size(q, q_kilo)
        try:
            groups.append((count(int(n or 1), "count", 1, MAX_REQUESTS),
                           Request(query_len, _size(kv, kv_kilo) if kv else query_len)))
        except FieldError as exc:
            raise UsageError(f"--batch-spec: {text!r}: segment {segment!r}: {exc}") from None
    try:
        return expand(groups)
    except FieldError as exc:
        raise UsageError(f"--batch-spec: {text!r}: {exc}") from None


def load_document(path: Path) -> object:
    """A batch-shapes file as Python data: YAML for .yaml/.yml (needs pyyaml), JSON otherwise."""
    text = read_text(path, "batch-shapes file")
    if base_suffix(path) in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise UsageError(f"{path}: reading YAML needs pyyaml (pip install pyyaml); "
                             "a JSON batch-shapes file needs nothing") from None
        try:
            return yaml.safe_load(text)
        except (yaml.YAMLError, RecursionError) as exc:
            raise UsageError(f"{path}: not YAML ({' '.join(str(exc).split())[:200]})") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{path}: not JSON ({getattr(exc, 'msg', 'nested too deeply')}, "
                         f"line {getattr(exc, 'lineno', '?')})") from None


def _shape_request(value: object) -> tuple[int, Request]:
    if not isinstance(value, dict):
        raise FieldError("requests", f"expected an object, got {type(value).__name__}")
    unknown = sorted(set(value) - set(REQUEST_KEYS))
    if unknown:
        raise FieldError(unknown[0], f"unknown field; a request holds {', '.join(REQUEST_KEYS)}")
    if "query_len" not in value:
        raise FieldError("query_len", "missing")
    fields = {k: v for k, v in value.items() if k != "count"}
    fields.setdefault("kv_len", value["query_len"])
    return count(value.get("count", 1), "count", 1, MAX_REQUESTS), Request(**fields)


def read_shapes(path: Path) -> list[tuple[str, TraceStep]]:
    """attnbench's batch-shapes file -> (case name, step) for each case, in the file's order."""
    path = Path(path)
    document = load_document(path)
    cases = document.get("cases") if isinstance(document, dict) else None
    if not isinstance(cases, list) or not cases:
        raise UsageError(f"{path}: expected {{\"cases\": [{{\"name\": ..., \"requests\": [...]}}, ...]}}")
    out, rows = [], 0
    for i, case in enumerate(cases):
        label = f"{path}: cases[{i}]"
        if not isinstance(case, dict) or not isinstance(case.get("requests"), list):
            raise UsageError(f"{label}: expected an object with a list of requests")
        name = case.get("name", f"case{i}")
        if not isinstance(name, str):
            raise UsageError(f"{label}: name: expected a string, got {name!r}")
        label = f"{label} ({name})"
        groups = []
        for j, request in enumerate(case["requests"]):
            try:
                groups.append(_shape_request(request))
            except FieldError as exc:
                raise UsageError(f"{label}: requests[{j}]: {exc}") from None
        try:
            out.append((name, expand(groups)))
        except FieldError as exc:
            raise UsageError(f"{label}: {exc}") from None
        rows += len(out[-1][1].requests)
        check_rows(rows, label)
    return out
