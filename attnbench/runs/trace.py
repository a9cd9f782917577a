"""`attnbench trace`'s jobs: read any supported input into a step trace, synthesize one, write it.

Why here: the traces room (attnbench/traces) only parses and builds; writing a file belongs to a
job. An output file is written atomically (results/atomic.py) and never over something that is
not attnbench's: a symlink, a directory, or a non-empty file are refused, and `--force` replaces
only a file that reads as the same kind attnbench writes (a step trace by its header line, a
request trace by every line), so a user's own file is never lost. An output that is also an input
is refused even with --force.
"""

from __future__ import annotations

import gzip
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from attnbench.errors import AttnbenchError, UsageError
from attnbench.kernels.workload import MAX_BLOCK_SIZE, MAX_CONTEXT, MAX_SEED
from attnbench.results.atomic import replace_atomic, write_text_atomic
from attnbench.traces import jsonl, requests, vllm_shapes
from attnbench.traces.log_steps import LogLengths, log_trace
from attnbench.traces.scheduler import SchedulerConfig, simulate
from attnbench.traces.step_logs import read_log
from attnbench.traces.steps import Header, Shape, Trace, TraceStep, check_rows


def _reads_as(path: Path, reader: Callable[[Path], object]) -> bool:
    try:
        reader(path)
    except AttnbenchError:
        return False
    return True


def claim_output(path: Path, force: bool, inputs: list[Path], reader: Callable[[Path], object],
                 flag: str = "--out") -> None:
    """Refuse an output that is an input, a link, not a file, or a non-empty file attnbench did not
    write (with --force: one that does not read as what `reader` reads)."""
    if any(p.exists() and path.exists() and p.resolve() == path.resolve() for p in inputs):
        raise UsageError(f"{flag}: {path} is also an input; write the trace to another file")
    if path.is_symlink():
        raise UsageError(f"{flag}: {path} is a symlink; give the file itself or a new name")
    if path.exists() and not path.is_file():
        raise UsageError(f"{flag}: {path} is not a regular file")
    if path.exists() and path.stat().st_size > 0:
        if not force:
            raise UsageError(f"{flag}: {path} is not empty; choose a new file or --force over a trace attnbench wrote")
        if not _reads_as(path, reader):
            raise UsageError(f"{flag}: {path} is not a file attnbench wrote (it does not read as one); "
                             "--force replaces only those")
    if not path.parent.is_dir():
        raise UsageError(f"{flag}: {path.parent} is not a directory")


def write_output(path: Path, text: str, flag: str = "--out") -> Path:
    """The text at path, gzip-compressed when the name ends in .gz (no name or time in the gzip
    header, so the same text makes the same file)."""
    try:
        if path.name.lower().endswith(".gz"):
            return replace_atomic(path, lambda tmp: tmp.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0)))
        return write_text_atomic(path, text)
    except OSError as exc:
        raise UsageError(f"{flag}: cannot write {path}: {exc.strerror or exc}") from None


INPUT_FLAGS = "--steps/--shapes/--case/--batch-spec/--timed-trace/--burstgpt/--flashinfer-bench/--sglang-log/--vllm-log"


@dataclass(frozen=True)
class TraceInputs:
    """What `trace convert` reads: exactly one kind of input."""

    steps: Path | None = None
    shapes: Path | None = None
    cases: list[str] = field(default_factory=list)
    batch_specs: list[str] = field(default_factory=list)
    timed_trace: Path | None = None
    burstgpt: Path | None = None
    time_unit: str = "s"
    flashinfer_bench: Path | None = None
    fib_root: Path | None = None
    sglang_log: Path | None = None
    vllm_log: Path | None = None
    log_lengths: LogLengths | None = None

    def files(self) -> list[Path]:
        return [Path(p) for p in (self.steps, self.shapes, self.timed_trace, self.burstgpt, self.flashinfer_bench,
                                  self.sglang_log, self.vllm_log) if p is not None]

    def check_one(self) -> None:
        given = [flag for flag, value in (("--steps", self.steps), ("--shapes", self.shapes), ("--case", self.cases),
                                          ("--batch-spec", self.batch_specs), ("--timed-trace", self.timed_trace),
                                          ("--burstgpt", self.burstgpt),
                                          ("--flashinfer-bench", self.flashinfer_bench),
                                          ("--sglang-log", self.sglang_log), ("--vllm-log", self.vllm_log)) if value]
        if len(given) != 1:
            raise UsageError(f"{'/'.join(given) or INPUT_FLAGS}: give exactly one kind of input")


def scheduled(reqs: list[requests.TimedRequest], config: SchedulerConfig, source: str, shape: Shape,
              synthesized: bool, details: dict) -> Trace:
    """A request trace through the scheduler simulation, its parameters and outcome in the header."""
    sim = simulate(reqs, config)
    generator = {"requests": {"count": len(reqs), **details}, "scheduler": config.as_dict(),
                 "finished": sim.finished, "unfinished": sim.unfinished, "simulated_seconds": sim.seconds}
    return Trace(Header(source, shape, synthesized, generator), sim.steps)


def _named_steps(named: list[tuple[str, TraceStep]], source: str, shape: Shape) -> Trace:
    check_rows(sum(len(step.requests) for _, step in named), source)
    return Trace(Header(source, shape, generator={"cases": [name for name, _ in named]}),
                 tuple(step for _, step in named))


def convert(inputs: TraceInputs, shape: Shape, config: SchedulerConfig) -> Trace:
    """Any supported input -> a step trace (request traces go through the scheduler simulation, an
    aggregate log's counts get per-request lengths drawn as `inputs.log_lengths` says)."""
    inputs.check_one()
    if inputs.sglang_log or inputs.vllm_log:
        engine, path = ("sglang", inputs.sglang_log) if inputs.sglang_log else ("vllm", inputs.vllm_log)
        return log_trace(read_log(path, engine), path, engine, inputs.log_lengths, shape)
    if inputs.steps:
        trace = jsonl.read_trace(inputs.steps)
        return Trace(Header(trace.header.source, shape.over(trace.header.shape), trace.header.synthesized,
                            trace.header.generator), trace.steps)
    if inputs.shapes:
        return _named_steps(vllm_shapes.read_shapes(inputs.shapes), f"batch-shapes file {inputs.shapes}",
                            shape)
    if inputs.cases:
        return _named_steps([vllm_shapes.parse_case(c) for c in inputs.cases], "vllm bench forward --case", shape)
    if inputs.batch_specs:
        named = [(spec, vllm_shapes.parse_batch_spec(spec)) for spec in inputs.batch_specs]
        return _named_steps(named, "vllm attention_benchmarks --batch-specs", shape)
    if inputs.flashinfer_bench:
        from attnbench.traces import flashinfer_bench  # brings numpy and safetensors

        file_shape, named, skipped = flashinfer_bench.read_workloads(inputs.flashinfer_bench, inputs.fib_root)
        trace = _named_steps(named, f"flashinfer-bench workloads {inputs.flashinfer_bench}",
                             shape.over(file_shape))
        return Trace(Header(trace.header.source, trace.header.shape,
                            generator={**trace.header.generator, "skipped_empty_rows": skipped}), trace.steps)
    if inputs.timed_trace:
        reqs = requests.read_timed(inputs.timed_trace, inputs.time_unit)
        return scheduled(reqs, config, f"timed trace {inputs.timed_trace}", shape, False,
                         {"time_unit": inputs.time_unit})
    reqs, skipped = requests.read_burstgpt(inputs.burstgpt)
    return scheduled(reqs, config, f"BurstGPT CSV {inputs.burstgpt}", shape, False, {"skipped_no_response": skipped})


@dataclass(frozen=True)
class Synthetic:
    """`trace synth` and `trace requests`: the request generator's parameters, named like the flags."""

    num_requests: int
    rate: float
    input_len: requests.LengthDist
    output_len: requests.LengthDist
    prefix_len: int = 0
    prefix_share: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        checks = [(1 <= self.num_requests <= requests.MAX_REQUESTS, "--num-requests",
                   f"between 1 and {requests.MAX_REQUESTS}"),
                  (math.isfinite(self.rate) and 0 <= self.rate <= 1e6, "--rate", "between 0 (all at once) and 1e6"),
                  (0 <= self.prefix_len <= MAX_CONTEXT, "--prefix-len", f"between 0 and {MAX_CONTEXT}"),
                  (0 <= self.prefix_share <= 1, "--prefix-share", "between 0 and 1"),
                  (0 <= self.seed <= MAX_SEED, "--seed", "between 0 and 2**63 - 1")]
        for ok, flag, need in checks:
            if not ok:
                raise UsageError(f"{flag}: must be {need}, got {getattr(self, flag[2:].replace('-', '_'))}")

    def draw(self) -> list[requests.TimedRequest]:
        return requests.synthesize(self.num_requests, self.rate, self.input_len, self.output_len, self.prefix_len,
                                   self.prefix_share, self.seed)

    def as_dict(self) -> dict:
        return {"num_requests": self.num_requests, "rate": self.rate, "input_len": str(self.input_len),
                "output_len": str(self.output_len), "prefix_len": self.prefix_len,
                "prefix_share": self.prefix_share, "seed": self.seed}


def synth(synthetic: Synthetic, shape: Shape, config: SchedulerConfig) -> Trace:
    return scheduled(synthetic.draw(), config, "synthetic requests", shape, True, synthetic.as_dict())


def write_trace(trace: Trace, out: Path, force: bool, inputs: list[Path]) -> Path:
    claim_output(out, force, inputs, jsonl.read_trace)
    return write_output(out, jsonl.trace_text(trace))


def write_requests(reqs: list[requests.TimedRequest], out: Path, force: bool) -> Path:
    claim_output(out, force, [], requests.read_timed)
    return write_output(out, requests.timed_text(reqs))


def write_flashinfer_bench(trace: Trace, out: Path, force: bool, page_size: int | None,
                           inputs: tuple[Path, ...] = ()) -> dict[str, int]:
    """The trace as flashinfer-bench workloads under `out` (a run directory: new, empty, or one this
    command wrote, with --force; not one that holds `inputs`): workloads/gqa_paged/DEFINITION.jsonl
    and the index tensors under blob/, each folder made fresh (RunDir.subdir: never through a link).
    Returns the workloads written per definition."""
    import json

    from safetensors.numpy import save_file

    from attnbench.runs.rundir import RunDir
    from attnbench.traces import flashinfer_bench

    shape = trace.header.shape
    if not (shape.num_heads and shape.num_kv_heads and shape.head_dim):
        raise UsageError("TRACE: its header records no attention shape; convert it with --heads, --kv-heads and "
                         "--dim first (trace convert --steps TRACE ...)")
    page = page_size if page_size is not None else (shape.block_size or 1)
    if not 1 <= page <= MAX_BLOCK_SIZE:
        raise UsageError(f"--page-size: must be between 1 and {MAX_BLOCK_SIZE}, got {page}")
    run, lines = RunDir.prepare(Path(out), force=force, inputs=inputs), {}
    with run.locked():
        for i, step in enumerate(trace.steps):
            for name, line, tensors in flashinfer_bench.step_workloads(step, shape, page, f"step{i}"):
                blob = Path(line["workload"]["inputs"]["kv_indptr"]["path"])
                folder = run.subdir(*blob.parent.parts)
                replace_atomic(folder / blob.name, lambda tmp, tensors=tensors: save_file(tensors, str(tmp)))
                lines.setdefault(name, []).append(json.dumps(line))
        for name, texts in lines.items():
            path = run.subdir("workloads", "gqa_paged") / f"{name}.jsonl"
            write_text_atomic(path, "".join(text + "\n" for text in texts))
    return {name: len(texts) for name, texts in lines.items()}
