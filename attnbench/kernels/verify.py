"""The `attnbench verify` job: which backend x strategy is graph-safe under which policy.

Why a job of its own: `kernel --mode graph` captures and replays one batch, and e2e replays decode
graphs on other decode batches; neither shows what happens when a captured attention call meets a
batch it was not captured on (the seed PR's bug). This runs graphsafe.replay_check over the
issue's replay cases for every backend x strategy x policy and says which fail.

A failure is a finding, not an error, except where something attnbench times today relies on it
(`gates`): a failed replay of the capture batch itself (what `kernel --mode graph` does), and a
`safe` failure on the decode cases (what e2e's decode graphs do: padding rows, longer contexts) of
a backend that declares itself graph-safe. decode -> mixed gates nothing yet: no mode replays a
decode graph on a mixed batch until e2e's full graphs (issue 11).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

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
    gates: bool  # e2e's decode graphs replay batches like this one today


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
    return [Case("decode -> mixed", dec, mixed, gates=False),
            Case("short -> long context", dec, _decode(seqs, long), gates=True),
            Case("fewer -> more sequences", _decode(fewer, short), _decode(fewer + seqs, short), gates=True)]


def describe(batch: Batch) -> str:
    return f"{batch.rule} ({batch.num_seqs} seqs, {batch.num_tokens} tokens, max kv {max(batch.kv_lens)})"


def verify_rows(backends: list[str], strategies: list[str], policies: list[str], point: SweepPoint,
                cases: list[Case], device: torch.device, on_row=None) -> list[dict]:
    """One row per backend x strategy x policy x case (plus a `capture batch` row per combination)."""
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
                    if skip:
                        row.update(verdict="skipped", reason=skip, gates=False)
                    else:
                        base, replay = replay_check(backend, strategy, point, case.capture, [case.replay],
                                                    policy, device)
                        bad = base if base["verdict"] != "pass" else replay
                        reason = bad.get("reason", "")
                        if base["verdict"] != "pass":
                            reason = f"on the capture batch itself: {reason}"
                        row.update(verdict="pass" if bad["verdict"] == "pass" else "FAIL", reason=reason,
                                   rel_l2_error=replay["rel_l2_error"],
                                   gates=backend.graph_safe and (base["verdict"] != "pass" or
                                                                 (policy == "safe" and case.gates)))
                    rows.append(row)
                    if on_row:
                        on_row(row)
    return rows


def gating_failures(rows: list[dict]) -> list[dict]:
    """Failures of what kernel or e2e rely on in graph mode: these make verify exit 1."""
    return [r for r in rows if r["verdict"] == "FAIL" and r["gates"]]


def summary(rows: list[dict]) -> str:
    """Markdown: per backend x strategy, which policies passed every case."""
    lines = ["# attnbench verify", "", "| backend | strategy | policy | passed | failed cases |", "|---|---|---|---|---|"]
    combos = dict.fromkeys((r["backend"], r["strategy"], r["policy"]) for r in rows)
    for backend, strategy, policy in combos:
        mine = [r for r in rows if (r["backend"], r["strategy"], r["policy"]) == (backend, strategy, policy)]
        ran = [r for r in mine if r["verdict"] != "skipped"]
        failed = [r["case"] for r in ran if r["verdict"] == "FAIL"]
        passed = f"{len(ran) - len(failed)}/{len(ran)}" if ran else "skipped: " + mine[0]["reason"]
        lines.append(f"| {backend} | {strategy} | {policy} | {passed} | {', '.join(failed) or '-'} |")
    gating = gating_failures(rows)
    lines += ["", f"{len(gating)} failure(s) of what kernel/e2e graph mode relies on (exit 1 if any); "
              "naive failures elsewhere are expected findings (the seed PR's bug)."]
    for r in gating:
        lines.append(f"- {r['backend']} {r['strategy']} {r['policy']} {r['case']}: {r['reason']}")
    return "\n".join(lines) + "\n"


def write_results(rows: list[dict], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "verify.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows({k: r.get(k, "") for k in COLUMNS} for r in rows)
    (out / "summary.md").write_text(summary(rows))
