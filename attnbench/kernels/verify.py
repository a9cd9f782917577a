"""The `attnbench verify` job: which backend x strategy is graph-safe under which policy.

Why a job of its own: `kernel --mode graph` captures and replays one batch, and e2e replays its
graphs on other batches of a bucket; neither shows by itself what happens when a captured
attention call meets a batch it was not captured on (the seed PR's bug). This runs
graphsafe.replay_check over the issue's replay cases for every backend x strategy x policy.

Verdicts: `pass`, `FAIL`, `skipped` (the backend cannot run the point), and `unsupported`: the
case lies outside what the backend declares a captured graph may be replayed on
(Backend.graph_replay; FlashInfer: single-token decode batches only). Such a case is not run: a
backend that declares it does not do something is not failing it, and the e2e full-graph mode
runs those steps eagerly.

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
import math
from dataclasses import dataclass

import torch

from attnbench.kernels.backends.registry import get_backend
from attnbench.kernels.graphsafe import POLICIES, replay_check
from attnbench.kernels.workload import Batch, SweepPoint

COLUMNS = ("backend", "library", "library_version", "strategy", "policy", "case", "verdict", "rel_l2_error",
           "gates", "reason", "capture", "replay")


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


def verify_rows(backends: list[str], strategies: list[str], policies: list[str], point: SweepPoint,
                cases: list[Case], device: torch.device, on_row=None) -> list[dict]:
    """One row per backend x strategy x policy x case; a case outside the backend's graph_replay
    is `unsupported` and not run."""
    rows = []
    for name in backends:
        backend = get_backend(name)
        package, version = backend.library()
        for strategy in strategies:
            skip = backend.supports(point, strategy, device)
            for policy in policies:
                if policy not in POLICIES:
                    raise ValueError(f"unknown policy {policy!r}")
                head = {"backend": name, "library": package, "library_version": version, "strategy": strategy,
                        "policy": policy}
                for case in cases:
                    row = {**head, "case": case.name, "capture": describe(case.capture),
                           "replay": describe(case.replay), "rel_l2_error": math.nan}
                    unsupported = (backend.graph_replay_refusal(case.capture)
                                   or backend.graph_replay_refusal(case.replay))
                    if skip:
                        row.update(verdict="skipped", reason=skip, gates=False)
                    elif unsupported:
                        row.update(verdict="unsupported", reason=unsupported, gates=False)
                    else:
                        row.update(check_case(backend, strategy, point, case, policy, device))
                    rows.append(row)
                    if on_row:
                        on_row(row)
    return rows


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
    """Failures of what kernel or e2e rely on in graph mode: these make verify exit 1."""
    return [r for r in rows if r["verdict"] == "FAIL" and r["gates"]]


def summary(rows: list[dict]) -> str:
    """Markdown: per backend x strategy x policy, which cases passed, failed or are unsupported."""
    lines = ["# attnbench verify", "", "| backend | strategy | policy | passed | failed cases | unsupported cases |",
             "|---|---|---|---|---|---|"]
    combos = dict.fromkeys((r["backend"], r["strategy"], r["policy"]) for r in rows)
    for backend, strategy, policy in combos:
        mine = [r for r in rows if (r["backend"], r["strategy"], r["policy"]) == (backend, strategy, policy)]
        ran = [r for r in mine if r["verdict"] in ("pass", "FAIL")]
        failed = [r["case"] for r in ran if r["verdict"] == "FAIL"]
        unsupported = [r["case"] for r in mine if r["verdict"] == "unsupported"]
        skipped = [r for r in mine if r["verdict"] == "skipped"]
        passed = "skipped: " + skipped[0]["reason"] if skipped else f"{len(ran) - len(failed)}/{len(ran)}"
        lines.append(f"| {backend} | {strategy} | {policy} | {passed} | {', '.join(failed) or '-'} | "
                     f"{', '.join(unsupported) or '-'} |")
    gating = gating_failures(rows)
    lines += ["", f"{len(gating)} failure(s) of what kernel/e2e graph mode relies on (the safe policy; exit 1 if "
              "any); naive failures are expected findings (the seed PR's bug); unsupported cases lie outside a "
              "backend's declared graph_replay and were not run."]
    for r in gating:
        lines.append(f"- {r['backend']} {r['strategy']} {r['policy']} {r['case']}: {r['reason']}")
    return "\n".join(lines) + "\n"


def results_csv(rows: list[dict]) -> str:
    """verify.csv's text: one line per case, COLUMNS in order."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: r.get(k, "") for k in COLUMNS} for r in rows)
    return text.getvalue()
