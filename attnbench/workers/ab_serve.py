"""The worker of one `attnbench ab` side, run as a script by that side's Python (workers/ab_pool.py).

It is started by file path, not as a module: the attnbench it imports is the side's own (its
src= checkout first on PYTHONPATH, or what its venv has), and so are torch and the kernel
libraries. What crosses between the two processes is plain JSON, one message a line, so two
attnbench versions need not agree on a pickled class: the plan comes in as its fields, a point as
SweepPoint's fields, rows go out as the dicts the sweep writes to results.csv.

Messages out: {"ready": versions} once set up (or {"failed": [verdict, reason]}), then per point
{"rows": [...]} or {"failed": [verdict, reason]}. The protocol keeps its own copy of stdout:
fd 1 itself is pointed at stderr, so a library that prints cannot corrupt a message.
"""

import json
import os
import sys

if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]  # this script's folder is not a package root: its files must not shadow top-level names


def versions() -> dict:
    """What this side runs: its attnbench (version, commit, where it was imported from), Python,
    torch, the kernel libraries and the GPU, as env.json records them."""
    import attnbench
    from attnbench.results.env import collect

    env = collect(["attnbench-ab-worker"])
    env.pop("command", None)
    env.pop("timestamp", None)
    return {**env, "attnbench_path": os.path.dirname(os.path.abspath(attnbench.__file__))}


def reference_cache() -> dict:
    """PointRunner's keyword for this process's reference cache: each round rebuilds a point's
    inputs from its seed, so its reference is kept (kernels/refcache.py). A side whose attnbench
    predates the cache gets none and computes the reference every round."""
    try:
        from attnbench.kernels.refcache import ReferenceCache
    except ImportError:
        return {}
    return {"references": ReferenceCache()}


def setup(spec: dict):
    """The side's point runner: every plan field from the parent, one replicate per call."""
    import torch

    from attnbench.device import device_name, select
    from attnbench.kernels.sweep import PointRunner, SweepPlan
    from attnbench.kernels.timing import TimingConfig
    from attnbench.kernels.workload import SweepPoint

    device = select(torch.device(spec["device"]))
    gpu_name = device_name(device)
    plan = SweepPlan(points=(), backends=tuple(spec["backends"]), strategies=tuple(spec["strategies"]),
                     modes=tuple(spec["modes"]), timing=TimingConfig(**spec["timing"]), device=spec["device"],
                     replicates=1, lacking=tuple(tuple(pair) for pair in spec["lacking"]))

    references = reference_cache()

    def measure(point: dict) -> list[dict]:
        try:
            return list(PointRunner(plan, SweepPoint(**point), gpu_name, **references).rows())
        finally:  # the other side's worker shares the GPU: hand back what this point's tensors cached
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return measure


def main() -> None:
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def send(message: dict) -> None:
        out.write(json.dumps(message, default=str) + "\n")

    try:
        from attnbench.errors import error_reason
        from attnbench.kernels.sweep import failure_verdict

        measure = setup(json.loads(sys.stdin.readline()))
        send({"ready": versions()})
    except Exception as exc:  # noqa: BLE001  any start-up failure, said in one line by the parent
        send({"failed": ["error", f"the worker could not start: {type(exc).__name__}: {exc}"]})
        return
    for line in sys.stdin:
        try:
            send({"rows": measure(json.loads(line))})
        except Exception as exc:  # noqa: BLE001  the point failed as a whole: its inputs, its reference
            send({"failed": [failure_verdict(exc), error_reason(exc)]})


if __name__ == "__main__":
    main()
