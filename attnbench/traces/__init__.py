"""Step traces: the batches a serving engine really runs, one engine step at a time.

Why a room of its own: a sweep point (kernels/workload.py) is a batch attnbench invents; a trace is
a stream of batches read from elsewhere (vLLM's shapes files and batch specs, request traces through
a scheduler simulation, flashinfer-bench's workloads, SGLang's and vLLM's aggregate step logs). steps.py holds the format, jsonl.py reads and
writes it, the other modules turn each kind of input into it (and flashinfer_bench.py a step back
into workloads). Nothing here touches a device or writes a file.
"""
