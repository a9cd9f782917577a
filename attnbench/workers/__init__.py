"""Running work elsewhere: pool.py runs tasks in worker processes under a watchdog; isolated.py
(kernel sweep points) and isolated_e2e.py (e2e points) are its two users on one device,
devices.py spreads points over local GPUs (a pool per device), distributed.py runs a sweep's
shards as torchrun ranks gathered by rank 0, and shards.py decides which points a shard takes.
Tensor-parallel e2e (one model over ranks) lives with the model, in e2e/parallel.py."""
