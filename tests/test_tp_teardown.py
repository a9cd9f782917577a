"""A tensor-parallel rank's teardown is bounded: a barrier or group destruction that hangs (seen on
the 2-GPU H200 after llama-2-70b TP 2 had written its results) is reported with the threads'
stacks and turns into a non-zero exit code instead of a process that never ends."""

import threading

import pytest

from attnbench.e2e import parallel


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    monkeypatch.setitem(parallel._TEARDOWN, "ok", True)


def test_a_teardown_that_returns_keeps_the_exit_code():
    parallel._bounded(lambda: None, "rank 0: the final barrier", 5)
    assert parallel.teardown_code() == 0 and parallel.teardown_code(3) == 3


def test_a_hanging_teardown_is_left_after_its_time_and_fails_the_exit_code(capsys):
    release = threading.Event()
    try:
        parallel._bounded(release.wait, "rank 1: the final barrier", 0.2)
    finally:
        release.set()
    err = capsys.readouterr().err
    assert "rank 1: the final barrier did not finish in 0 s" in err
    assert "attnbench-teardown" in err or "Thread" in err  # every thread's stack is dumped
    assert parallel.teardown_code() == 1


def test_a_failing_teardown_is_reported_not_raised(capsys):
    def boom():
        raise RuntimeError("NCCL communicator was aborted")

    parallel._bounded(boom, "rank 0: destroying the process group", 5)
    assert "destroying the process group failed: NCCL communicator was aborted" in capsys.readouterr().err
    assert parallel.teardown_code(0) == 1


@pytest.mark.parametrize("device,destroyed", [("cuda", False), ("cpu", True)])
def test_an_nccl_group_is_left_to_the_process_exit(monkeypatch, device, destroyed):
    # NCCL's shutdown hung on both ranks on the 2-GPU H200 after the final barrier had passed; the
    # rank ends with exit_now right after, so only a gloo group is destroyed
    import torch
    calls = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(parallel, "_rank_device", lambda flag, rank: torch.device(device, 0) if device == "cuda"
                        else torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: None)
    monkeypatch.setattr(parallel.dist, "init_process_group", lambda *a, **k: calls.append("init"))
    monkeypatch.setattr(parallel.dist, "barrier", lambda *a, **k: calls.append("barrier"))
    monkeypatch.setattr(parallel.dist, "destroy_process_group", lambda: calls.append("destroy"))
    with parallel.tensor_parallel(2, device) as (tp, _):
        assert tp.size == 2
    assert calls == ["init", "barrier", *(["destroy"] if destroyed else [])]
    assert parallel.teardown_code() == 0
