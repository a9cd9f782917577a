"""End to end: a Llama-family model, a paged-KV engine with CUDA graphs (decode, piecewise, full), its runner and agreement."""
