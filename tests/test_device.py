"""attnbench.device: --device resolution and making a device current (CPU-only tests)."""

import pytest
import torch
from torch.cuda._utils import _get_device_index

from attnbench import device as dev


@pytest.fixture
def cuda_calls(monkeypatch):
    """torch.cuda.set_device as a recorder that validates its argument the way torch does (a device
    without an index is refused), with cuda:1 current."""
    calls = []

    def set_device(d):
        calls.append(_get_device_index(d))

    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    return calls


@pytest.mark.parametrize("name,expected", [("cuda", [1]), ("cuda:0", [0]), ("cuda:1", [1]), ("cpu", [])])
def test_select_makes_the_device_current(cuda_calls, name, expected):
    # a bare "cuda" (the --device default on a GPU) is the current device: it once reached set_device
    # as is, which torch refuses, and every kernel and e2e run on a GPU stopped there
    assert dev.select(torch.device(name)) == torch.device(name)
    assert cuda_calls == expected


def test_torch_refuses_a_bare_cuda_device():
    # what the recorder above relies on: without this refusal the bare-cuda case could not fail
    with pytest.raises(ValueError):
        _get_device_index(torch.device("cuda"))
