"""The e2e engine on the backend contract, on the CPU: a step plans once (not once per layer), and
an eager step's whole forward, every layer through the bound plan, reads nothing back to the
host (the guard of tests/test_backend_contract.py)."""

from __future__ import annotations

import pytest
import torch
from test_backend_contract import no_host_reads

from attnbench.e2e.engine import Engine
from attnbench.e2e.model import ModelArgs, random_model
from attnbench.e2e.runner import ModelEngines
from attnbench.e2e.scheduler import Sequence, make_prompts, schedule
from attnbench.kernels.backends.reference import ReferenceBackend

TINY = ModelArgs.from_name("tiny")


@pytest.mark.parametrize("strategy", ["unified", "split"])
@pytest.mark.parametrize("chunk_size", [None, 16], ids=["whole-prefill", "chunked"])
def test_an_engine_plans_once_per_step_not_per_layer(monkeypatch, strategy, chunk_size):
    model = random_model(TINY, torch.bfloat16, "cpu", seed=3)
    engine = ModelEngines(model, max_num_seqs=3, max_model_len=64, chunk_size=chunk_size).engine(
        "reference", strategy)
    plans = []
    real = ReferenceBackend.plan  # patched on the class: the registry's instance is shared by every test
    monkeypatch.setattr(ReferenceBackend, "plan", lambda self, *a: plans.append(a) or real(self, *a))
    gen = engine.generate(make_prompts(3, 20, TINY.vocab_size, seed=3), 4)
    assert len(plans) == len(gen.steps) and TINY.n_layer > 1
    assert {s.kind for s in gen.steps} >= {"prefill" if chunk_size is None else "mixed", "decode"}
    assert all(s.launch_host_us > 0 for s in gen.steps)


@pytest.mark.parametrize("strategy", ["unified", "split"])
def test_an_eager_step_forward_reads_nothing_back_to_the_host(strategy):
    """A whole model step through the bound plan, every layer, under the guard (chunked: mixed)."""
    model = random_model(TINY, torch.bfloat16, "cpu", seed=4)
    engine: Engine = ModelEngines(model, max_num_seqs=2, max_model_len=64, chunk_size=12).engine(
        "reference", strategy)
    seqs = [Sequence(i, p, len(p), 4) for i, p in enumerate(make_prompts(2, 10, TINY.vocab_size, seed=4))]
    seqs[0].num_cached = 10  # one decode row beside a prompt chunk: a mixed step
    seqs[0].tokens.append(5)
    engine.cache.reset()
    engine.cache.allocate(seqs[0], 10)
    step = engine.prepare(schedule(seqs, 12))
    assert step.kind == "mixed"
    launch = engine.load(step)
    with torch.inference_mode(), no_host_reads():
        logits = launch()
    assert torch.isfinite(logits).all()
