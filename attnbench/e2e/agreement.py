"""What an e2e point concludes: greedy-token agreement between runs and the run metrics.

The runner measures a point with these; results/e2e_report.py turns the rows into the seed's table and plots.

Agreement. Two runs of one request batch (unified vs split, graph vs eager) are compared token by
token. Up to and including a request's first divergent step both runs fed the model the same
tokens, so there the logit difference is pure numerics; after it, inputs differ and logits are not
comparable. Random-weight models have flat logits (the top two often sit within a few hundredths
of the logit spread), so bf16 noise alone can flip a near-tie and send a request down another
path: that is `near-tie`, not a bug. A run whose logits differ by more than LOGIT_TOLERANCE x the
logit spread where inputs were identical is a `MISMATCH` (the seed's graph bug gave garbage:
differences of several spreads). NaN or inf anywhere is `non-finite`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

from attnbench.e2e.rows import E2EMeasures
from attnbench.kernels.rows import cells

LOGIT_TOLERANCE = 0.5  # x the reference's logit spread (RMS about each position's mean)
FAILING = ("MISMATCH", "non-finite")


@dataclass(frozen=True)
class Agreement:
    verdict: str  # match, near-tie, MISMATCH or non-finite
    tokens_equal: float  # share of (request, step) tokens that are equal
    diverged_requests: int
    first_divergence: str  # "request R step S" (the earliest step), or ""
    max_logit_diff: float  # over the steps where both runs had the same inputs
    logit_scale: float
    margin_at_divergence: float  # reference: its token's logit minus the other run's token's logit
    tolerance: float = LOGIT_TOLERANCE

    def row(self) -> dict:
        return asdict(self)


def compare_generations(ref_tokens: list[list[int]], ref_logits, tokens: list[list[int]], logits,
                        tolerance: float = LOGIT_TOLERANCE) -> Agreement:
    """Agreement of a run with a reference run. logits: [request, step, vocab], or one [steps, vocab]
    tensor per request where requests generate different counts (a request trace); a request's
    tokens are as many as its logits' steps, the same in both runs."""
    lengths = torch.tensor([len(t) for t in ref_tokens])
    steps = int(lengths.max())
    pad = lambda rows: torch.tensor([list(t) + [-1] * (steps - len(t)) for t in rows])  # noqa: E731  equal padding
    ref_t, other_t = pad(ref_tokens), pad(tokens)
    differ = ref_t != other_t
    first = torch.where(differ.any(dim=1), differ.int().argmax(dim=1), torch.full_like(differ[:, 0], steps, dtype=torch.long))
    finite = all(bool(torch.isfinite(ref_logits[r]).all()) and bool(torch.isfinite(logits[r]).all())
                 for r in range(len(ref_tokens)))
    max_diff, sum_sq, count = 0.0, 0.0, 0
    for r in range(ref_t.shape[0]):  # one request at a time: float32 [steps, vocab] stays small
        same = int(min(first[r], lengths[r] - 1)) + 1
        ref = ref_logits[r][:same].float()
        max_diff = max(max_diff, float((ref - logits[r][:same].float()).abs().max()))
        sum_sq += float(((ref - ref.mean(dim=-1, keepdim=True)) ** 2).mean(dim=-1).sum())
        count += same
    scale = math.sqrt(sum_sq / count) if count else math.nan
    where, margin = "", math.nan
    if bool(differ.any()):
        r = int(torch.argmin(first * ref_t.shape[0] + torch.arange(ref_t.shape[0])))  # earliest step, then request
        s = int(first[r])
        where = f"request {r} step {s}"
        margin = float(ref_logits[r][s, int(ref_t[r, s])].float() - ref_logits[r][s, int(other_t[r, s])].float())
    if not finite:
        verdict = "non-finite"
    elif not max_diff <= tolerance * scale:
        verdict = "MISMATCH"
    else:
        verdict = "near-tie" if where else "match"
    real = torch.arange(steps)[None, :] < lengths[:, None]
    return Agreement(verdict, float((~differ)[real].float().mean()), int(differ.any(dim=1).sum()), where,
                     max_diff, scale, margin, tolerance)


def worst(verdicts) -> str:
    order = ["non-finite", "MISMATCH", "near-tie", "match"]
    found = [v for v in verdicts if v in order]
    return min(found, key=order.index) if found else ""


def compare_checks(head: dict, reference: str, ref, run: str, other) -> dict:
    """One row of agreement.csv: `head`'s columns, the two runs compared ("strategy mode"), then
    the Agreement of `other`'s check run (tokens, logits) with `ref`'s."""
    result = compare_generations(ref.tokens, ref.logits, other.tokens, other.logits)
    return {**head, "reference": reference, "run": run, **result.row()}


def settle_agreement(agreements: list[dict], backend: str, run: str) -> tuple[str, str]:
    """A run's agreement, the worst comparison of `backend` it is in (run: "strategy mode"), and
    the problem that makes of its row ("" unless the agreement fails). The e2e runner and the
    trace serves both settle their rows with it, so a point and a trace judge alike."""
    verdict = worst(a["verdict"] for a in agreements if a["backend"] == backend and run in (a["reference"], a["run"]))
    return verdict, (f"agreement {verdict}" if verdict in FAILING else "")


def run_metrics(runs, batch_size: int, output_len: int) -> dict:
    """Latency percentiles and step times over measured runs (engine.Generation objects)."""
    def pct(values, q):
        return float(np.percentile(values, q)) if values else math.nan

    latency = [x for g in runs for x in g.latency_s]
    totals = [g.total_s for g in runs]
    steps = [s for g in runs for s in g.steps]
    by_kind = {k: [s.device_ms for s in steps if s.kind == k] for k in ("prefill", "mixed", "decode")}
    return cells(E2EMeasures(
        request_p50_s=pct(latency, 50), request_p90_s=pct(latency, 90), request_p99_s=pct(latency, 99),
        run_p50_s=pct(totals, 50), output_tok_s=batch_size * output_len / pct(totals, 50),
        prefill_step_p50_ms=pct(by_kind["prefill"], 50), mixed_step_p50_ms=pct(by_kind["mixed"], 50),
        decode_step_p50_ms=pct(by_kind["decode"], 50), decode_step_p90_ms=pct(by_kind["decode"], 90),
        host_us_per_step=pct([s.host_us for s in steps], 50),
        **{f"{k}_launch_host_us": pct([s.launch_host_us for s in steps if s.kind == k], 50)
           for k in ("prefill", "mixed", "decode")},
        **{f"{k}_steps_per_run": len(v) / len(runs) for k, v in by_kind.items()},
        graph_steps_per_run=sum(s.graph for s in steps) / len(runs)))
