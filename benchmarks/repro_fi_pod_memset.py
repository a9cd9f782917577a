"""Standalone reproducer for FlashInfer's POD zeroing its scheduler counters on the legacy stream.

Plain torch + flashinfer (no attnbench), for an upstream bug report
(docs/kernels/flashinfer-bug-pod-memset.md). Runs on one H100/H200 (a first run JIT-compiles POD).

PODWithPagedKVCacheWrapper runs one prefill request (512 tokens, causal) beside 64 single-token
decodes (1024 keys each) of 32 query / 8 KV heads x 128, page 16. It runs once eagerly (the
reference), is captured into a CUDA graph on torch's capture stream, and the graph is replayed
three times with both outputs poisoned with NaN before each replay. Each replay's outputs are
compared with the eager run, and each replay is timed. Usage: python benchmarks/repro_fi_pod_memset.py
"""

import flashinfer
import torch

QH, KVH, DIM, PAGE, DECODES, DEC_KV, PREFILL = 32, 8, 128, 16, 64, 1024, 512


def describe(out, ref):
    nan = out.isnan().float().mean().item()
    diff = (out.float() - ref.float()).abs().nan_to_num(float("inf")).max().item()
    return f"NaN share {nan:.2f}, max |diff| vs eager {diff:.3g}"


def main():
    dev, dtype = torch.device("cuda"), torch.bfloat16
    print(f"flashinfer {flashinfer.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    gen = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, device=dev).to(dtype)
    pages = DECODES * DEC_KV // PAGE
    k_cache, v_cache = rand(pages, PAGE, KVH, DIM), rand(pages, PAGE, KVH, DIM)
    q_d, q_p, k_p, v_p = rand(DECODES, QH, DIM), rand(PREFILL, QH, DIM), rand(PREFILL, KVH, DIM), rand(PREFILL, KVH, DIM)
    indptr = torch.arange(DECODES + 1, dtype=torch.int32) * (DEC_KV // PAGE)
    indices = torch.arange(pages, dtype=torch.int32)
    last_page_len = torch.full((DECODES,), PAGE, dtype=torch.int32)
    workspace = torch.zeros(256 << 20, dtype=torch.uint8, device=dev)
    pod = flashinfer.PODWithPagedKVCacheWrapper(workspace, "NHD")
    pod.plan(indptr, indices, last_page_len, QH, KVH, DIM, PAGE, q_data_type=dtype, kv_data_type=dtype)

    def run():
        return pod.run(q_p, k_p, v_p, q_d, (k_cache, v_cache), causal_p=True)
    ref_p, ref_d = (t.clone() for t in run())
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graph asks
        run()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_p, out_d = run()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(1, 4):
        out_p.fill_(float("nan"))
        out_d.fill_(float("nan"))
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        print(f"replay {i}: {start.elapsed_time(end) * 1e3:.0f} us; prefill: {describe(out_p, ref_p)}; "
              f"decode: {describe(out_d, ref_d)}")
    print("expected on a fixed build: every replay NaN share 0.00 and a small diff; "
          "the bug: replays after the first leave NaN (they did none of the work) in far less time")


if __name__ == "__main__":
    main()
