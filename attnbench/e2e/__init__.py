"""End to end: a Llama-family model, a paged-KV engine with decode CUDA graphs, its runner and agreement."""
