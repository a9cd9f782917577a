"""The `attnbench verify` job: which backend x strategy is graph-safe under which policy.

Why a job of its own: `kernel --mode graph` captures and replays one batch, and e2e replays its
graphs on other batches of a bucket; neither shows by itself what happens when a captured
attention call meets a batch it was not captured on (the seed PR's bug). This runs
graphsafe.replay_check over the issue's replay cases for every backend x strategy x policy.

Verdicts: `pass`, `FAIL`, `skipped` (the backend cannot run the point, or the case does not fit
in memory: plan.check_fits's estimate with its headroom) and `unsupported`: the case lies outside
what the backend declares a captured graph may be replayed on (Backend.graph_replay; FlashInfer:
single-token decode batches only). Such a case is not run: a backend that declares it does not do
something is not failing it, and the e2e full-graph mode runs those steps eagerly.

A backend that is not graph-safe (the reference) has no graph to replay: its replays would only
show that its plan reads the lengths at plan time (under naive, its plan read the bucket's
cu_seqlens_q with a stale zero tail, lengths no batch has: issue 20's "shape '[1, 8, 4, 128]' is
invalid" was that, not a wrong reference). Its cases run `eager` instead (policy column):
planned on each batch of the case and checked against a float64 attention (kernels/oracle64.py).
That is what the CPU can judge, and a failure there fails verify (exit 1): the reference is the
oracle of every other verdict.

A failure is a finding, not an error, except where something attnbench times relies on it
(`gates`, exit 1): a `safe` failure of a graph-safe backend, on any case inside its declared
graph_replay, the capture batch itself included. `safe` is the recipe `kernel --mode graph` and
e2e's graphs use (decode graphs: padding rows, longer contexts, more sequences; full graphs:
a bucket first captured on a decode step replays mixed steps too). `naive` gates nothing: it is
the seed's recipe, shown to be wrong (e2e runs it only as `--graph-policy naive`, expected to
mismatch). Its failures include failed captures: under naive, FA2 cannot capture a decode batch
in a bucket with more token rows than sequences (its packed-GQA path for max_seqlen_q == 1
reshapes q by the sequence count: "shape '[5, 8, 4, 128]' is invalid"). That is not a harness
artifact: an e2e full-graph bucket holds more token rows than sequences whenever a mixed batch
shares it (here the decode capture batch shares the mixed replay batch's bucket), and naive
freezes the decode batch's max_seqlen_q == 1 into it. The safe recipe's max_seqlen_q (the
bucket's longest query) avoids that path wherever the bucket can hold a longer query.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from dataclasses import dataclass

import torch

from attnbench.kernels.backends.registry import get_backend
from attnbench.kernels.graphsafe import POLICIES, replay_check
from attnbench.kernels.inputs import HEADROOM, device_bytes, free_bytes, host_bytes
from attnbench.kernels.oracle64 import eager_check, float64_bytes
from attnbench.kernels.workload import Batch, SweepPoint

COLUMNS = ("backend", "library", "library_version", "strategy", "policy", "case", "verdict", "rel_l2_error",
           "gates", "reason", "capture", "replay")
GiB = 2**30


@dataclass(frozen=True)
class Case:
    name: str
    capture: Batch
    replay: Batch


def _decode(num_seqs: int, context: int) -> Batch:
    """num_seqs decode sequences with contexts spread over (context/2, context]."""
    kv = tuple(max(1, context - (i * context) // (2 * num_seqs)) for i in range(num_seqs))
    return Batch((1,) * num_seqs, kv, (True,) * num_seqs, rule=f"decode {num_seqs} seqs, kv <= {context}")


def replay_cases(short: int, long: int, seqs: int = 4) -> list[Case]:
    """The issue's three replays, each one change from its capture batch."""
    chunk = max(2, short // 2)
    dec = _decode(seqs, short)
    mixed = Batch(dec.query_lens + (chunk,), dec.kv_lens + (chunk + short,), dec.is_decode + (False,),
                  rule=f"mixed: {seqs} decode + a {chunk}-token chunk on a {short}-token prefix")
    fewer = max(1, seqs // 2)
    return [Case("decode -> mixed", dec, mixed),
            Case("short -> long context", dec, _decode(seqs, long)),
            Case("fewer -> more sequences", _decode(fewer, short), _decode(fewer + seqs, short))]


def describe(batch: Batch) -> str:
    return f"{batch.rule} ({batch.num_seqs} seqs, {batch.num_tokens} tokens, max kv {max(batch.kv_lens)})"


def case_need(point: SweepPoint, case: Case, device: torch.device, eager: bool) -> int:
    """Bytes one case takes where it runs, with kernel's 20 % headroom (plan.check_fits): both
    batches' inputs and outputs, the float32 reference's working set on the CPU (host_bytes), block
    tables and metadata buffers, and the float64 attention of an eager check."""
    need = 0
    for batch in (case.capture, case.replay):
        tables = 16 * batch.num_seqs * math.ceil(max(batch.kv_lens) / point.block_size)
        tensors = host_bytes(point, batch) if device.type == "cpu" else device_bytes(point, batch)
        need += tensors + tables + (float64_bytes(point, batch) if eager else 0)
    return int(need * HEADROOM)


def plan_rows(backends: list[str], strategies: list[str], policies: list[str], point: SweepPoint,
              cases: list[Case], device: torch.device, free: int | None = None) -> list[dict]:
    """One row per backend x strategy x policy x case, its verdict decided where it will not run:
    `skipped` (the backend cannot run the point, or the case does not fit in memory) or
    `unsupported` (outside what the backend declares a graph may be replayed on). A backend that is
    not graph-safe has no graph to replay: one `eager` row per case instead of one per policy.
    Rows to run have `verdict` ""."""
    for policy in policies:
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}")
    free = free_bytes(device) if free is None else free
    rows = []
    for name in backends:
        backend = get_backend(name)
        package, version = backend.library()
        for strategy, policy, case in itertools.product(strategies, policies if backend.graph_safe else ["eager"],
                                                        cases):
            refused = refusal(backend, strategy, point, case, device, free)
            row = {"backend": name, "library": package, "library_version": version, "strategy": strategy,
                   "policy": policy, "case": case.name, "capture": describe(case.capture),
                   "replay": describe(case.replay), "rel_l2_error": math.nan, "verdict": "", "reason": "",
                   "gates": False}
            if refused:
                row.update(verdict=refused[0], reason=refused[1])
            rows.append(row)
    return rows


def refusal(backend, strategy: str, point: SweepPoint, case: Case, device: torch.device,
            free: int | None) -> tuple[str, str] | None:
    """(verdict, reason) of a case that will not run: skipped (the backend cannot run the point, or
    the case does not fit in `free` bytes) or unsupported (outside the backend's graph_replay)."""
    if reason := backend.supports(point, strategy, device):
        return "skipped", reason
    need = case_need(point, case, device, eager=not backend.graph_safe)
    if free is not None and need > free:
        where = "free on the GPU" if device.type == "cuda" else "available on the CPU"
        return "skipped", f"needs ~{need / GiB:.1f} GiB, {free / GiB:.1f} GiB {where}"
    if backend.graph_safe and (reason := (backend.graph_replay_refusal(case.capture)
                                          or backend.graph_replay_refusal(case.replay))):
        return "unsupported", reason
    return None


def run_rows(rows: list[dict], point: SweepPoint, cases: list[Case], device: torch.device, on_row=None) -> list[dict]:
    """Run every row planned to run (verdict ""): a replay check, or an eager check against float64."""
    by_name = {case.name: case for case in cases}
    for row in rows:
        if not row["verdict"]:
            backend, case = get_backend(row["backend"]), by_name[row["case"]]
            if row["policy"] == "eager":
                row.update(eager_check(backend, row["strategy"], point, (case.capture, case.replay), device),
                           gates=True)
            else:
                row.update(check_case(backend, row["strategy"], point, case, row["policy"], device))
        if on_row:
            on_row(row)
    return rows


def verify_rows(backends: list[str], strategies: list[str], policies: list[str], point: SweepPoint,
                cases: list[Case], device: torch.device, on_row=None) -> list[dict]:
    """plan_rows, then run_rows: every row with its verdict."""
    return run_rows(plan_rows(backends, strategies, policies, point, cases, device), point, cases, device, on_row)


def check_case(backend, strategy: str, point: SweepPoint, case: Case, policy: str, device) -> dict:
    """verdict, reason, rel_l2_error and gates of one case: the capture batch replayed, then the other."""
    base, replay = replay_check(backend, strategy, point, case.capture, [case.replay], policy, device)
    bad = base if base["verdict"] != "pass" else replay
    reason = bad.get("reason", "")
    if base["verdict"] != "pass":
        reason = f"on the capture batch itself: {reason}"
    failed = bad["verdict"] != "pass"
    return {"verdict": "FAIL" if failed else "pass", "reason": reason, "rel_l2_error": replay["rel_l2_error"],
            "gates": failed and backend.graph_safe and policy == "safe"}


def gating_failures(rows: list[dict]) -> list[dict]:
    """Failures of what kernel or e2e rely on (a safe replay of a graph-safe backend) or of a
    backend checked eagerly against float64 (the reference): these make verify exit 1."""
    return [r for r in rows if r["verdict"] == "FAIL" and r["gates"]]


def judged(rows: list[dict]) -> list[dict]:
    """Rows that ran and have a verdict (pass or FAIL)."""
    return [r for r in rows if r["verdict"] in ("pass", "FAIL")]


def not_run(rows: list[dict]) -> list[str]:
    """One line per backend and reason for the rows that were not run (skipped, unsupported)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["verdict"] in ("skipped", "unsupported"):
            groups.setdefault((r["backend"], r["verdict"], r["reason"]), []).append(r)
    return [f"{verdict}: {backend} {','.join(dict.fromkeys(r['strategy'] for r in mine))}, "
            f"{', '.join(dict.fromkeys(r['case'] for r in mine))}: {reason}"
            for (backend, verdict, reason), mine in groups.items()]


def counts_line(rows: list[dict]) -> str:
    """The honest count: every FAIL is counted, and which of them make verify exit 1."""
    ran, gating = judged(rows), gating_failures(rows)
    failed = [r for r in ran if r["verdict"] == "FAIL"]
    findings = len(failed) - len(gating)
    return (f"{len(ran)} case(s) judged: {len(ran) - len(failed)} pass, {len(failed)} FAIL ({len(gating)} fail "
            f"verify, exit 1 if any{f'; {findings} naive-policy finding(s), the seed PR bug' if findings else ''}); "
            f"{len(rows) - len(ran)} not run (skipped or unsupported).")


def summary(rows: list[dict]) -> str:
    """Markdown: per backend x strategy x policy, which cases passed, failed or were not run."""
    lines = ["# attnbench verify", "", "| backend | strategy | policy | passed | failed cases | not run |",
             "|---|---|---|---|---|---|"]
    combos = dict.fromkeys((r["backend"], r["strategy"], r["policy"]) for r in rows)
    for backend, strategy, policy in combos:
        mine = [r for r in rows if (r["backend"], r["strategy"], r["policy"]) == (backend, strategy, policy)]
        ran = judged(mine)
        failed = [r["case"] for r in ran if r["verdict"] == "FAIL"]
        refused = [f"{r['case']} ({r['verdict']})" for r in mine if r not in ran]
        lines.append(f"| {backend} | {strategy} | {policy} | {len(ran) - len(failed)}/{len(ran)} | "
                     f"{', '.join(failed) or '-'} | {', '.join(refused) or '-'} |")
    lines += ["", counts_line(rows), *[f"- {line}" for line in not_run(rows)]]
    for r in gating_failures(rows):
        lines.append(f"- FAIL {r['backend']} {r['strategy']} {r['policy']} {r['case']}: {r['reason']}")
    return "\n".join(lines) + "\n"


def results_csv(rows: list[dict]) -> str:
    """verify.csv's text: one line per case, COLUMNS in order."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: r.get(k, "") for k in COLUMNS} for r in rows)
    return text.getvalue()
