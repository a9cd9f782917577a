"""Running work elsewhere: pool.py runs tasks in worker processes under a watchdog; isolated.py
(kernel sweep points) and isolated_e2e.py (e2e points) are its two users on one device,
devices.py spreads points over local GPUs (a pool per device), distributed.py is the torchrun
plumbing (the ranks, their gloo group, rows sent to rank 0; the sweep over ranks is
runs/kernel_ranks.py), and shards.py decides which points a shard takes.
Tensor-parallel e2e (one model over ranks) lives with the model, in e2e/parallel.py."""
