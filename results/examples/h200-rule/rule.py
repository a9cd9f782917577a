"""A dispatch rule fitted by `attnbench rule fit` (max depth 4, graph mode).

Holds for GPU NVIDIA H200 with vllm-fa2 0.24.0, vllm-fa3 0.24.0, flashinfer 0.6.6, flashinfer-ba 0.6.6.
Standard library only: paste `choose` into a serving engine.
"""


def choose(decode_kv_lens, prefill_query_lens, prefill_kv_lens, num_heads, num_kv_heads, head_dim, draft_tokens=0):
    """(backend, strategy) for one step: its decode rows' KV lengths, its prefill chunks' query and
    KV lengths, and the attention shape. With speculative decoding, draft_tokens is the step's draft
    tokens summed over its decode rows (each row's query tokens beyond its first): the rows the rule
    was fitted on count them with the prefill tokens, and so does this function."""
    decode_rows = len(decode_kv_lens)
    prefill_tokens = sum(prefill_query_lens) + draft_tokens
    query_tokens = decode_rows + prefill_tokens
    kv_lens = list(decode_kv_lens) + list(prefill_kv_lens)
    num_seqs = len(kv_lens)
    total_kv_tokens = sum(kv_lens)
    max_kv_len = max(kv_lens, default=0)
    mean_kv_len = total_kv_tokens / num_seqs if num_seqs else 0.0
    decode_kv_tokens = sum(decode_kv_lens)
    mean_decode_kv_len = decode_kv_tokens / decode_rows if decode_rows else 0.0
    prefill_kv_tokens = sum(prefill_kv_lens)
    max_prefill_query_len = max(prefill_query_lens, default=0)
    decode_share = decode_rows / query_tokens if query_tokens else 0.0
    gqa_group = num_heads / num_kv_heads if num_kv_heads else 0.0
    if decode_share <= 0.22811348736286163:
        if prefill_kv_tokens <= 574.0:
            if decode_share <= 0.0445867907255888:
                if mean_kv_len <= 893.2181701660156:
                    return ('vllm-fa3', 'unified')
                else:
                    return ('flashinfer', 'split')
            else:
                if mean_decode_kv_len <= 789.2559509277344:
                    return ('vllm-fa3', 'unified')
                else:
                    return ('flashinfer-ba', 'unified')
        else:
            if max_kv_len <= 3621.0:
                if max_prefill_query_len <= 64.5:
                    return ('flashinfer-ba', 'unified')
                else:
                    return ('vllm-fa3', 'unified')
            else:
                if prefill_kv_tokens <= 2153.5:
                    return ('flashinfer', 'split')
                else:
                    return ('vllm-fa3', 'unified')
    else:
        if total_kv_tokens <= 6445.0:
            if max_kv_len <= 570.0:
                if decode_kv_tokens <= 1009.5:
                    return ('vllm-fa2', 'split')
                else:
                    return ('flashinfer-ba', 'unified')
            else:
                if mean_kv_len <= 2558.75:
                    return ('vllm-fa3', 'split')
                else:
                    return ('flashinfer', 'split')
        else:
            if num_seqs <= 21.5:
                if prefill_kv_tokens <= 1.0:
                    return ('flashinfer', 'split')
                else:
                    return ('vllm-fa3', 'unified')
            else:
                if max_prefill_query_len <= 448.0:
                    return ('vllm-fa3', 'split')
                else:
                    return ('flashinfer', 'split')
