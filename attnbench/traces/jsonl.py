"""Reading and writing a step trace file: JSON Lines, a header line, then one line per step.

Why columns: a decode-heavy step holds a hundred requests; one object per request would make a trace
of a few hundred steps megabytes. A step line holds one list per field, a value per request, in the
engine's order: `{"query_len": [1, 1, 512], "kv_len": [800, 33, 1536], "chunked": [false, false, true]}`.
`query_len` and `kv_len` are always there; `num_draft_tokens`, `chunked` and `prefix_hit` are left
out when every request has the default (0, false, 0). Since version 2 a step built from an aggregate
log carries `"synthesized": true` (one value for the step: its lengths were drawn, not read); a
version 1 file is read as before. Any other key is refused, so a misspelt field is an error, not a
default. docs/guides/traces.md documents the format.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from attnbench.errors import UsageError
from attnbench.traces.files import json_line, numbered_lines, where
from attnbench.traces.steps import (FORMAT, OPTIONAL, VERSION, FieldError, Header, Request, Shape, Trace, TraceStep,
                                    check_rows)

COLUMNS = ("query_len", "kv_len", *OPTIONAL)
HEADER_KEYS = {"format", "version", "source", "shape", "synthesized", "generator"}


def written_version(trace: Trace) -> int:
    """The oldest version that holds the trace: 2 only when a step is marked synthesized, so a trace
    without one still reads in an attnbench that knows version 1 only."""
    return 2 if any(step.synthesized for step in trace.steps) else 1


def header_line(header: Header, version: int = VERSION) -> str:
    return json.dumps({"format": header.format, "version": version, "source": header.source,
                       "shape": header.shape.as_dict(), "synthesized": header.synthesized,
                       "generator": header.generator}, sort_keys=False)


def step_line(step: TraceStep) -> str:
    columns = {name: [getattr(r, name) for r in step.requests] for name in COLUMNS}
    kept = {name: values for name, values in columns.items()
            if name not in OPTIONAL or any(v != OPTIONAL[name] for v in values)}
    if step.synthesized:
        kept["synthesized"] = True
    return json.dumps(kept, separators=(",", ":"))


def trace_lines(trace: Trace) -> Iterator[str]:
    yield header_line(trace.header, written_version(trace))
    for step in trace.steps:
        yield step_line(step)


def trace_text(trace: Trace) -> str:
    return "".join(line + "\n" for line in trace_lines(trace))


def parse_header(value: dict) -> Header:
    """The header object, checked: format and version first, so an unknown file says what it is not."""
    if value.get("format") != FORMAT:
        raise FieldError("format", f"expected {FORMAT!r} on the first line, got {value.get('format')!r} "
                         "(is this an attnbench step trace?)")
    version = value.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise FieldError("version", f"expected a positive integer, got {version!r}")
    if version > VERSION:
        raise FieldError("version", f"version {version} is newer than this attnbench reads ({VERSION}); "
                         "upgrade attnbench")
    unknown = sorted(set(value) - HEADER_KEYS)
    if unknown:
        raise FieldError(unknown[0], f"unknown header field; the header holds {', '.join(sorted(HEADER_KEYS))}")
    source, shape, generator = value.get("source", ""), value.get("shape", {}), value.get("generator", {})
    if not isinstance(source, str):
        raise FieldError("source", f"expected a string, got {source!r}")
    if not isinstance(shape, dict) or not isinstance(generator, dict):
        raise FieldError("shape" if not isinstance(shape, dict) else "generator", "expected a JSON object")
    unknown = sorted(set(shape) - set(Shape.__dataclass_fields__))
    if unknown:
        raise FieldError(f"shape.{unknown[0]}", "unknown shape field")
    synthesized = value.get("synthesized", False)
    if not isinstance(synthesized, bool):
        raise FieldError("synthesized", f"expected true or false, got {synthesized!r}")
    return Header(source=source, shape=Shape(**shape), synthesized=synthesized, generator=generator,
                  version=version)


def parse_step(value: dict, version: int = VERSION) -> TraceStep:
    """One step line: equal-length columns, each value checked as a Request field, and (version 2
    on) the step's `synthesized` marker."""
    value = dict(value)
    synthesized = value.pop("synthesized", False) if version >= 2 else False
    if not isinstance(synthesized, bool):
        raise FieldError("synthesized", f"expected true or false, got {synthesized!r}")
    unknown = sorted(set(value) - set(COLUMNS))
    if unknown:
        raise FieldError(unknown[0], f"unknown step field; a version {version} step holds "
                         f"{', '.join(COLUMNS + (('synthesized',) if version >= 2 else ()))}")
    for name in ("query_len", "kv_len"):
        if name not in value:
            raise FieldError(name, "missing")
    lengths = set()
    for name, column in value.items():
        if not isinstance(column, list) or not column:
            raise FieldError(name, f"expected a non-empty list (one value per request), got {column!r}"[:200])
        lengths.add(len(column))
    if len(lengths) > 1:
        raise FieldError(next(n for n in value if len(value[n]) != len(value["query_len"])),
                         f"has {sorted(lengths)} values; every column holds one value per request")
    rows = [dict(zip(value, values)) for values in zip(*value.values())]
    requests = []
    for i, row in enumerate(rows):
        try:
            requests.append(Request(**row))
        except FieldError as exc:
            raise UsageError(f"{exc} (request {i})") from None
    return TraceStep(tuple(requests), synthesized)


def read_trace(path: Path, limit: int | None = None) -> Trace:
    """A step trace file, whole; a bad line is one error naming the file, the line and the field."""
    path = Path(path)
    header, steps, rows = None, [], 0
    for number, text in numbered_lines(path, "step trace", limit):
        value = json_line(path, number, text)
        try:
            if header is None:
                header = parse_header(value)
            else:
                steps.append(parse_step(value, header.version))
                rows += len(steps[-1].requests)
        except UsageError as exc:
            raise UsageError(f"{where(path, number)}: {exc}") from None
        check_rows(rows, where(path, number))
    if header is None:
        raise UsageError(f"{path}: the step trace is empty")
    if not steps:
        raise UsageError(f"{path}: the step trace holds a header but no step")
    return Trace(header, tuple(steps))
