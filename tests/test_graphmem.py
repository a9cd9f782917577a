"""graph_mem_mb counts the segments of the graphs' private pool (CPU test with a fake allocator
snapshot). It used to be the change in memory_reserved around a capture, which a capture's own
empty_cache made negative on the H200 (-18 MB)."""

import torch

from attnbench.e2e.graphmem import pool_bytes

SEGMENTS = [
    {"device": 0, "total_size": 2 << 20, "segment_pool_id": (0, 0)},   # the default pool
    {"device": 0, "total_size": 20 << 20, "segment_pool_id": (1, 7)},  # the graphs' pool
    {"device": 0, "total_size": 2 << 20, "segment_pool_id": (1, 7)},
    {"device": 1, "total_size": 64 << 20, "segment_pool_id": (1, 7)},  # same id, another GPU
    {"device": 0, "total_size": 8 << 20, "segment_pool_id": (1, 8)},   # another engine's graphs
]


def test_only_the_pools_segments_on_its_device_count(monkeypatch):
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda *a, **k: {"segments": SEGMENTS})
    assert pool_bytes((1, 7), "cuda:0") == 22 << 20
    assert pool_bytes((1, 7), torch.device("cuda", 1)) == 64 << 20
    assert pool_bytes((1, 8), "cuda:0") == 8 << 20


def test_a_bare_cuda_device_is_the_current_one(monkeypatch):
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda *a, **k: {"segments": SEGMENTS})
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert pool_bytes((1, 7), "cuda") == 64 << 20


def test_no_pool_yet_is_nothing():
    assert pool_bytes(None, "cuda:0") == 0
