"""Running work elsewhere: pool.py runs tasks in worker processes under a watchdog; isolated.py
(kernel sweep points) and isolated_e2e.py (e2e points) are its two users. Other GPUs and machines
belong beside them."""
