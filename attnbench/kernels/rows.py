"""The columns of a kernel sweep's results.csv, as dataclasses: one field is one column.

A row is a point (`workload.SweepPoint`), the batch drawn for it (`BatchColumns`), what ran it
(`RunColumns`), what was measured (`Measurement`), the GPU's clocks while it was timed (`Clocks`,
filled by the run's telemetry), what the library decided (`Decisions`) and the long text cells
kept last (`RawCells`). results/files.py
lists the CSV's columns from these fields, in this order, so a column is added in one place; the
fields' metadata (workload.py: KEY, LABEL) marks the run columns that identify a row and labels.

Rows travel as plain dicts (a backend's plan adds keys of its own, folded into `details` when
written): `cells` turns the dataclasses into that dict at the edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import ClassVar

from attnbench.kernels.workload import KEY, LABEL, NOT_A_COLUMN, Batch, SweepPoint


@dataclass(frozen=True)
class BatchColumns:
    """What `build_batch` drew for the point: its real size, and the rule it followed. The decode
    rows' KV and the longest prefill chunk tell the two halves of a mixed batch apart, and the decode
    rows' query length tells speculative decoding's from plain ones (a dispatch rule's features,
    results/rule_cells.py)."""

    batch_tokens: int
    num_seqs: int
    num_decode_seqs: int
    max_kv_len: int
    total_kv_tokens: int
    decode_kv_tokens: int  # KV tokens of the decode rows (what split's decode kernel reads)
    max_prefill_query_len: int  # the longest query of the other rows (0 without one)
    decode_query_len: int  # the decode rows' shared query length: 1, 1 + drafts when speculative, 0 without
    lengths_rule: str

    @classmethod
    def of(cls, batch: Batch) -> BatchColumns:
        decode_kv = sum(kv for kv, decode in zip(batch.kv_lens, batch.is_decode) if decode)
        prefill_query = max((q for q, decode in zip(batch.query_lens, batch.is_decode) if not decode), default=0)
        decode_query = max((q for q, decode in zip(batch.query_lens, batch.is_decode) if decode), default=0)
        return cls(batch.num_tokens, batch.num_seqs, batch.num_decode_seqs, max(batch.kv_lens), sum(batch.kv_lens),
                   decode_kv, prefill_query, decode_query, batch.rule)


@dataclass(frozen=True)
class RunColumns:
    """Where and how the point ran: the device, the backend and its library, strategy, mode, L2 state."""

    device: str
    gpu: str
    backend: str = field(metadata={KEY: True})
    library: str | None = None
    library_version: str | None = None
    strategy: str = field(default="", metadata={KEY: True})
    mode: str = field(default="", metadata={KEY: True})
    l2: str | None = field(default=None, metadata={KEY: True, LABEL: "{}-L2"})


class Sparse:
    """A row part whose None fields are columns it does not fill: cells() leaves them out, so the
    row dict it updates keeps what it had (a skip's blank measures, the runner's graph counts)."""

    sparse: ClassVar[bool] = True


@dataclass(frozen=True)
class Measurement(Sparse):
    """What a row measured and concluded; None is a column the row leaves blank (a skip, an error)."""

    median_ms: float | None = None
    p10_ms: float | None = None
    p90_ms: float | None = None
    prefill_part_ms: float | None = None  # a mixed batch's parts, each timed alone (kernels/parts.py)
    decode_part_ms: float | None = None
    samples: int | None = None
    calls_per_sample: int | None = None
    converged: bool | None = None
    l2_flush_ms: float | None = None  # cold L2: the median flush before a sample, never inside median_ms
    host_metadata_us: float | None = None
    host_plan_us: float | None = None
    kernel_launches: int | None = None
    gflop: float | None = None
    mbytes: float | None = None
    tflops: float | None = None
    gbps: float | None = None
    pct_of_peak: float | None = None
    peak_source: str | None = None
    rel_l2_error: float | None = None
    max_abs_error: float | None = None
    tolerance: float | None = None
    verdict: str | None = None
    reason: str | None = None
    replicates: int | None = None
    replicate_medians_ms: str | None = None  # space-separated, only when there are several
    replicate_samples: str | None = None
    stopped: str | None = None  # converged or budget: why the row took no more replicates (replicate_rule.py)
    ratio_half_width: float | None = None  # compare's A/A interval for the row, half its width, a share
    stop_threshold: float | None = None  # the threshold the stopping rule resolves


@dataclass(frozen=True)
class Clocks(Sparse):
    """The GPU while the row was timed (results/telemetry.py samples it)."""

    sm_clock_min_mhz: float | None = None
    sm_clock_median_mhz: float | None = None
    mem_clock_median_mhz: float | None = None
    gpu_temp_max_c: float | None = None
    power_max_w: float | None = None
    throttle_reasons: str | None = None
    clock_flag: str | None = None  # throttled / below max clock / why there is no telemetry


@dataclass(frozen=True)
class Decisions(Sparse):
    """What the library decided for the row's plan (Plan.decisions; backends/decisions.py DECISIONS
    says what each means): one text value, or `role=value` pairs where a plan's launches differ."""

    decision_num_splits: str | None = None
    decision_pack_gqa: str | None = None
    decision_max_splits: str | None = None
    decision_fi_backend: str | None = None
    decision_tensor_cores: str | None = None
    decision_split_kv: str | None = None
    decision_ctas: str | None = None
    decision_triton_path: str | None = None
    decision_segments: str | None = None


@dataclass(frozen=True)
class RawCells(Sparse):
    """Long text cells, last: what the library chose (`key=value` pairs) and every sample."""

    details: str | None = None
    samples_ms: str | None = None


ROW_PARTS = (SweepPoint, BatchColumns, RunColumns, Measurement, Clocks, Decisions, RawCells)


def names(*parts: type) -> list[str]:
    """The column names of these row dataclasses, in field order."""
    return [f.name for part in parts for f in fields(part)]


def cells(*parts) -> dict:
    """Row dataclasses -> one row dict, column -> value; a None field of a Sparse part is left out,
    and so is a field that is not a column (a GivenPoint's batch)."""
    return {f.name: getattr(part, f.name) for part in parts for f in fields(part)
            if (getattr(part, f.name) is not None or not getattr(part, "sparse", False))
            and not f.metadata.get(NOT_A_COLUMN)}
