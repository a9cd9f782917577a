"""The reference cache ab's workers keep: hits only on the same inputs, stays in its bound, still checks."""

from __future__ import annotations

from dataclasses import replace

import torch

from attnbench.kernels import refcache
from attnbench.kernels.check import check_output
from attnbench.kernels.inputs import make_inputs
from attnbench.kernels.refcache import ReferenceCache, compute_reference
from attnbench.kernels.sweep import PointRunner, SweepPlan
from attnbench.kernels.timing import TimingConfig
from attnbench.kernels.workload import SweepPoint
from attnbench.workers.ab_serve import reference_cache

POINT = SweepPoint("decode", 4, 2, head_dim=16, context="16")
QUICK = TimingConfig(warmup_ms=0.0, budget_ms=1.0, min_samples=3, max_samples=6)


def ref_bytes(point: SweepPoint) -> int:
    return point.num_tokens * point.num_heads * point.head_dim * 4


def test_a_repeated_point_hits_and_gives_the_computed_reference():
    cache = ReferenceCache()
    first = cache.reference(make_inputs(POINT, "cpu"))
    again = cache.reference(make_inputs(POINT, "cpu"))  # rebuilt from the seed, as every ab round does
    assert (cache.hits, cache.misses) == (1, 1)
    assert torch.equal(again, first) and torch.equal(again, compute_reference(make_inputs(POINT, "cpu")))


def test_another_seed_or_shape_or_dtype_misses():
    cache = ReferenceCache()
    cache.reference(make_inputs(POINT, "cpu"))
    for other in (replace(POINT, seed=1), replace(POINT, num_tokens=5), replace(POINT, head_dim=32),
                  replace(POINT, dtype="float16"), replace(POINT, context="24")):
        got = cache.reference(make_inputs(other, "cpu"))
        assert torch.equal(got, compute_reference(make_inputs(other, "cpu")))
    assert (cache.hits, cache.misses) == (0, 6)


def test_inputs_the_key_does_not_describe_are_computed_afresh():
    """Same point, inputs drawn from another seed (as a replicate on fresh values would be): the fingerprint differs."""
    cache = ReferenceCache()
    cache.reference(make_inputs(POINT, "cpu"))
    fresh = make_inputs(POINT, "cpu", seed=7)
    got = cache.reference(fresh)
    assert (cache.hits, cache.misses) == (0, 2)
    assert torch.equal(got, compute_reference(fresh))


def test_a_wrong_output_still_fails_on_a_hit():
    cache = ReferenceCache()
    right = cache.reference(make_inputs(POINT, "cpu"))
    ref = cache.reference(make_inputs(POINT, "cpu"))
    assert cache.hits == 1
    assert check_output(right.to(torch.bfloat16), ref, POINT.dtype)["verdict"] == "pass"
    assert check_output((right * 1.5).to(torch.bfloat16), ref, POINT.dtype)["verdict"] == "fail"
    poisoned = right.to(torch.bfloat16)
    poisoned[0, 0, 0] = float("nan")
    assert check_output(poisoned, ref, POINT.dtype)["verdict"] == "fail"


def test_what_a_caller_gets_is_its_own_copy():
    cache = ReferenceCache()
    cache.reference(make_inputs(POINT, "cpu")).fill_(float("nan"))
    again = cache.reference(make_inputs(POINT, "cpu"))
    assert cache.hits == 1 and bool(torch.isfinite(again).all())


def test_the_byte_bound_evicts_least_recently_used():
    points = [replace(POINT, seed=s) for s in range(3)]
    cache = ReferenceCache(max_bytes=2 * ref_bytes(POINT))
    for p in points:
        cache.reference(make_inputs(p, "cpu"))
    assert cache.nbytes <= cache.max_bytes and len(cache.entries) == 2
    cache.reference(make_inputs(points[0], "cpu"))  # evicted first: computed again
    assert (cache.hits, cache.misses) == (0, 4)
    cache.reference(make_inputs(points[2], "cpu"))
    assert cache.hits == 1 and cache.nbytes <= cache.max_bytes


def test_an_output_over_the_bound_is_never_kept():
    cache = ReferenceCache(max_bytes=ref_bytes(POINT) - 1)
    cache.reference(make_inputs(POINT, "cpu"))
    cache.reference(make_inputs(POINT, "cpu"))
    assert (cache.hits, cache.misses, cache.nbytes) == (0, 2, 0)


def test_a_cache_in_another_process_starts_empty():
    cache = ReferenceCache()
    cache.reference(make_inputs(POINT, "cpu"))
    cache.pid = -1  # as a forked child sees its parent's cache
    cache.reference(make_inputs(POINT, "cpu"))
    assert (cache.hits, cache.misses, len(cache.entries)) == (0, 2, 1)


def test_point_runners_share_a_workers_cache_and_rows_still_pass(monkeypatch):
    computed = []
    monkeypatch.setattr(refcache, "compute_reference", lambda inputs: computed.append(1) or compute_reference(inputs))
    plan = SweepPlan((POINT,), ("reference",), ("unified", "split"), ("eager",), QUICK, "cpu")
    references = reference_cache()["references"]
    for _ in range(3):  # three ab rounds of one side
        rows = list(PointRunner(plan, POINT, None, references=references).rows())
        assert [r["verdict"] for r in rows] == ["pass", "pass"]
    assert len(computed) == 1 and references.hits == 2
