"""flashinfer-bench workloads of its paged GQA definitions, read into steps and made from steps.

Why: flashinfer-bench's dataset (flashinfer-trace) records real kernel calls, one per line, for
definitions named `gqa_paged_decode_h{H}_kv{KV}_d{D}_ps{P}` and
`gqa_paged_prefill_causal_h{H}_kv{KV}_d{D}_ps{P}`; attnbench reads them as steps, and writes a step
trace as such workloads, so each tool can run the other's batches. A line is a Trace object,
`{"definition": NAME, "workload": {"uuid", "axes", "inputs"}, "solution": null, "evaluation": null}`,
whose index inputs are safetensors tensors at paths relative to the dataset's root
(flashinfer_bench/data/workload.py). The lengths follow from them as its definitions' references
compute them: request b's query is `qo_indptr[b+1] - qo_indptr[b]` tokens (a decode: 1), its pages
`kv_indptr[b+1] - kv_indptr[b]`, and its keys the pages times the page size, less what the last page
lacks (`kv_last_page_len[b]`, an input of the definitions whose page size is not 1). Each call is
one step, decode-only or prefill-only: flashinfer-bench does not link the two calls of one engine
step, and a written step becomes one decode and one prefill workload. Code is attnbench's own.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from attnbench.errors import UsageError
from attnbench.traces.files import checked_size, json_line, numbered_lines, where
from attnbench.traces.steps import FieldError, Request, Shape, TraceStep, check_rows

DEFINITION = re.compile(r"gqa_paged_(decode|prefill_causal)_h(\d{1,4})_kv(\d{1,4})_d(\d{1,4})_ps(\d{1,4})")
BLOB = "blob/workloads/gqa_paged"


def definition_name(stage: str, shape: Shape, page_size: int) -> str:
    kind = "decode" if stage == "decode" else "prefill_causal"
    return f"gqa_paged_{kind}_h{shape.num_heads}_kv{shape.num_kv_heads}_d{shape.head_dim}_ps{page_size}"


def parse_definition(name: object) -> tuple[str, Shape]:
    """(`decode` or `prefill`, the shape with page size as block size) of a paged GQA definition."""
    match = DEFINITION.fullmatch(name) if isinstance(name, str) else None
    if not match:
        raise FieldError("definition", f"{name!r} is not a paged GQA definition "
                         "(gqa_paged_decode_hH_kvK_dD_psP or gqa_paged_prefill_causal_hH_kvK_dD_psP)")
    stage, heads, kv_heads, dim, page = match.groups()
    return ("decode" if stage == "decode" else "prefill"), Shape(int(heads), int(kv_heads), int(dim),
                                                                 block_size=int(page))


def _load_index(root: Path, inputs: dict, name: str) -> np.ndarray:
    """One integer index tensor, 1-D, from the safetensors file the workload points to."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    spec = inputs.get(name)
    if not isinstance(spec, dict) or spec.get("type") != "safetensors":
        raise FieldError(f"inputs.{name}", "expected a safetensors input (a random or missing one carries no lengths)")
    if not isinstance(spec.get("path"), str) or not isinstance(spec.get("tensor_key"), str):
        raise FieldError(f"inputs.{name}", "a safetensors input needs a path and a tensor_key")
    if "\0" in spec["path"]:
        raise FieldError(f"inputs.{name}", f"the path {spec['path']!r} holds a NUL byte, which no file name can")
    path = root / spec["path"]
    checked_size(path, f"{name} tensor file")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise FieldError(f"inputs.{name}", f"{path} is not a safetensors file ({' '.join(str(exc).split())[:120]})") \
            from None
    tensor = tensors.get(spec["tensor_key"])
    if tensor is None or tensor.ndim != 1 or tensor.dtype.kind not in "iu":
        raise FieldError(f"inputs.{name}", f"{path} holds no 1-D integer tensor {spec['tensor_key']!r}")
    return tensor.astype(np.int64)


def _lengths(indptr: np.ndarray, name: str) -> np.ndarray:
    if len(indptr) < 2 or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
        raise FieldError(f"inputs.{name}", "expected an indptr: starts at 0, never decreases, at least 2 entries")
    return np.diff(indptr)


def workload_step(root: Path, stage: str, page_size: int, workload: dict) -> tuple[TraceStep, int]:
    """One workload's requests as a step, and how many empty rows (no query or no keys) it left out."""
    inputs = workload.get("inputs")
    if not isinstance(inputs, dict):
        raise FieldError("workload.inputs", "expected an object")
    pages = _lengths(_load_index(root, inputs, "kv_indptr"), "kv_indptr")
    queries = np.ones_like(pages) if stage == "decode" else _lengths(_load_index(root, inputs, "qo_indptr"), "qo_indptr")
    if len(queries) != len(pages):
        raise FieldError("inputs.qo_indptr", f"{len(queries)} requests, but kv_indptr has {len(pages)}")
    keys = pages * page_size
    if page_size > 1:
        last = _load_index(root, inputs, "kv_last_page_len")
        if len(last) != len(pages) or np.any((last < 1) | (last > page_size)):
            raise FieldError("inputs.kv_last_page_len", f"expected {len(pages)} values in 1..{page_size}")
        keys = np.where(pages > 0, keys - page_size + last, 0)
    kept = (queries > 0) & (keys > 0)
    check_rows(int(kept.sum()), "workload")
    try:
        requests = tuple(Request(int(q), int(k)) for q, k in zip(queries[kept], keys[kept]))
        return TraceStep(requests), int((~kept).sum())
    except FieldError as exc:
        raise FieldError("inputs", f"{exc}") from None


def default_root(path: Path) -> Path:
    """The dataset root: above workloads/<op_type>/FILE.jsonl, else the file's own folder."""
    return path.parent.parent.parent if path.parent.parent.name == "workloads" else path.parent


def read_workloads(path: Path, root: Path | None = None) -> tuple[Shape, list[tuple[str, TraceStep]], int]:
    """A workload JSON Lines file -> (its shape, (uuid, step) per workload, empty rows left out)."""
    path = Path(path)
    root = default_root(path) if root is None else Path(root)
    shape, named, skipped, rows = None, [], 0, 0
    for number, text in numbered_lines(path, "flashinfer-bench workload file"):
        line = json_line(path, number, text)
        try:
            workload, definition = line.get("workload", line), line.get("definition", path.stem)
            stage, line_shape = parse_definition(definition)
            if shape is not None and line_shape != shape:
                raise FieldError("definition", f"{definition!r} differs from the first line's shape")
            if not isinstance(workload, dict):
                raise FieldError("workload", "expected an object")
            step, empty = workload_step(root, stage, line_shape.block_size, workload)
        except UsageError as exc:
            raise UsageError(f"{where(path, number)}: {exc}") from None
        shape, rows, skipped = line_shape, rows + len(step.requests), skipped + empty
        check_rows(rows, where(path, number))
        named.append((str(workload.get("uuid", f"line{number}")), step))
    return shape, named, skipped


def _indices(requests: list[Request], page_size: int) -> dict[str, np.ndarray]:
    """The index tensors of one call: each request on fresh pages, numbered from 0 in order."""
    pages = [math.ceil(r.kv_len / page_size) for r in requests]
    kv_indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    tensors = {"qo_indptr": np.concatenate([[0], np.cumsum([r.query_len for r in requests])]).astype(np.int32),
               "kv_indptr": kv_indptr, "kv_indices": np.arange(kv_indptr[-1], dtype=np.int32)}
    if page_size > 1:
        tensors["kv_last_page_len"] = np.array([r.kv_len - (p - 1) * page_size for r, p in zip(requests, pages)],
                                               dtype=np.int32)
    return tensors


def step_workloads(step: TraceStep, shape: Shape, page_size: int, uuid: str) -> list[tuple[str, dict, dict]]:
    """(definition, workload line, tensors) for a step: its 1-token rows as a decode call, the rest as
    a causal prefill call (flashinfer-bench's decode definitions take one query token a request)."""
    decode = [r for r in step.requests if r.query_len == 1 and not r.chunked]
    prefill = [r for r in step.requests if not (r.query_len == 1 and not r.chunked)]
    out = []
    for stage, requests in (("decode", decode), ("prefill", prefill)):
        if not requests:
            continue
        name, key = definition_name(stage, shape, page_size), f"{uuid}-{stage}"
        tensors = _indices(requests, page_size)
        if stage == "decode":
            del tensors["qo_indptr"]
        axes = {"len_indptr": len(requests) + 1, "num_kv_indices": int(tensors["kv_indptr"][-1]),
                "num_pages": int(tensors["kv_indptr"][-1])}
        axes.update({"batch_size": len(requests)} if stage == "decode" else {"total_q": sum(r.query_len for r in requests)})
        blob = f"{BLOB}/{name}/{key}.safetensors"
        inputs = {"q": {"type": "random"}, "k_cache": {"type": "random"}, "v_cache": {"type": "random"},
                  **{t: {"type": "safetensors", "path": blob, "tensor_key": t} for t in tensors},
                  "sm_scale": {"type": "scalar", "value": shape.head_dim ** -0.5}}
        line = {"definition": name, "workload": {"uuid": key, "axes": axes, "inputs": inputs},
                "solution": None, "evaluation": None}
        out.append((name, line, tensors))
    return out
