"""A dispatch rule fitted by `attnbench rule fit` (max depth 6, graph mode).

Holds for GPU NVIDIA H200 with vllm-fa2 0.24.0, vllm-fa3 0.24.0, flashinfer 0.6.6, flashinfer-ba 0.6.6.
Standard library only: paste `choose` into a serving engine. It answers only for what it was fitted
on: another attention shape, or decode rows with more drafts than it saw, is a ValueError
(the engine's own default is the answer there), not a guess.
"""

SHAPES = {(32, 8, 128)}  # (heads, KV heads, head dim) the rule was measured on
MAX_DECODE_QUERY_LEN = 4  # the longest decode-row query it was measured on: 1 + drafts


def choose(decode_kv_lens, prefill_query_lens, prefill_kv_lens, num_heads, num_kv_heads, head_dim, draft_tokens=0):
    """(backend, strategy) for one step: its decode rows' KV lengths, its prefill chunks' query and
    KV lengths, and the attention shape. With speculative decoding, draft_tokens is the step's draft
    tokens summed over its decode rows (each row's query tokens beyond its first; the rows share one
    count): the rows the rule was fitted on count them with the prefill tokens, and so does this
    function. ValueError where the step lies outside what the rule was fitted on."""
    if (num_heads, num_kv_heads, head_dim) not in SHAPES:
        raise ValueError(f"this rule was fitted on (heads, KV heads, head dim) in {sorted(SHAPES)}, not "
                         f"{(num_heads, num_kv_heads, head_dim)}: fit one on rows of that shape")
    decode_rows = len(decode_kv_lens)
    decode_query_len = 1 + draft_tokens / decode_rows if decode_rows else 0
    if decode_query_len > MAX_DECODE_QUERY_LEN:
        raise ValueError(f"this rule was fitted on decode rows of at most {MAX_DECODE_QUERY_LEN} query "
                         f"token(s) ({MAX_DECODE_QUERY_LEN - 1} draft(s)), not {decode_query_len:g}: "
                         "fit one on a replay of this speculative decoding")
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
    if decode_share <= 0.2386128380894661:
        if max_prefill_query_len <= 60.0:
            if prefill_tokens <= 26.5:
                if total_kv_tokens <= 3944.0:
                    if prefill_tokens <= 15.5:
                        if total_kv_tokens <= 532.0:
                            return ('vllm-fa2', 'split')
                        else:
                            return ('vllm-fa3', 'unified')
                    else:
                        return ('flashinfer-ba', 'unified')
                else:
                    if mean_decode_kv_len <= 213.0:
                        return ('vllm-fa3', 'split')
                    else:
                        return ('vllm-fa3', 'unified')
            else:
                if decode_rows <= 12.0:
                    if num_seqs <= 6.0:
                        if mean_decode_kv_len <= 1613.875:
                            return ('vllm-fa3', 'unified')
                        else:
                            return ('flashinfer-ba', 'unified')
                    else:
                        return ('flashinfer-ba', 'unified')
                else:
                    if max_prefill_query_len <= 54.5:
                        return ('vllm-fa3', 'unified')
                    else:
                        return ('flashinfer-ba', 'unified')
        else:
            if prefill_kv_tokens <= 595.0:
                if decode_share <= 0.0445867907255888:
                    if max_kv_len <= 2114.5:
                        if mean_decode_kv_len <= 1541.2115478515625:
                            return ('vllm-fa3', 'unified')
                        else:
                            return ('flashinfer', 'split')
                    else:
                        if prefill_kv_tokens <= 497.5:
                            return ('vllm-fa3', 'unified')
                        else:
                            return ('flashinfer-ba', 'unified')
                else:
                    if num_seqs <= 19.5:
                        if max_prefill_query_len <= 206.0:
                            return ('vllm-fa3', 'unified')
                        else:
                            return ('flashinfer-ba', 'unified')
                    else:
                        if mean_kv_len <= 780.0784912109375:
                            return ('vllm-fa3', 'unified')
                        else:
                            return ('flashinfer-ba', 'unified')
            else:
                if num_seqs <= 8.5:
                    if max_prefill_query_len <= 407.5:
                        if decode_kv_tokens <= 2931.5:
                            return ('flashinfer', 'unified')
                        else:
                            return ('vllm-fa3', 'unified')
                    else:
                        if prefill_kv_tokens <= 7241.0:
                            return ('vllm-fa3', 'split')
                        else:
                            return ('vllm-fa3', 'unified')
                else:
                    if prefill_kv_tokens <= 1124.5:
                        if max_kv_len <= 5774.5:
                            return ('vllm-fa3', 'unified')
                        else:
                            return ('flashinfer', 'split')
                    else:
                        return ('vllm-fa3', 'unified')
    else:
        if total_kv_tokens <= 6658.5:
            if mean_decode_kv_len <= 1898.75:
                if prefill_kv_tokens <= 1.0:
                    if max_kv_len <= 534.5:
                        if decode_rows <= 4.0:
                            return ('vllm-fa2', 'split')
                        else:
                            return ('vllm-fa3', 'split')
                    else:
                        if decode_rows <= 9.5:
                            return ('vllm-fa3', 'split')
                        else:
                            return ('flashinfer-ba', 'unified')
                else:
                    if decode_share <= 0.2678571492433548:
                        return ('flashinfer-ba', 'unified')
                    else:
                        if decode_share <= 0.5357142984867096:
                            return ('vllm-fa3', 'unified')
                        else:
                            return ('flashinfer-ba', 'unified')
            else:
                if total_kv_tokens <= 4087.0:
                    if total_kv_tokens <= 2327.5:
                        return ('vllm-fa3', 'split')
                    else:
                        return ('flashinfer', 'split')
                else:
                    return ('vllm-fa3', 'split')
        else:
            if decode_share <= 0.4986187815666199:
                if max_kv_len <= 3880.0:
                    if max_kv_len <= 1523.5:
                        if prefill_kv_tokens <= 45.5:
                            return ('vllm-fa3', 'split')
                        else:
                            return ('flashinfer-ba', 'unified')
                    else:
                        if mean_decode_kv_len <= 728.3266906738281:
                            return ('vllm-fa3', 'split')
                        else:
                            return ('flashinfer-ba', 'unified')
                else:
                    if decode_rows <= 67.5:
                        if decode_share <= 0.25337837636470795:
                            return ('vllm-fa3', 'split')
                        else:
                            return ('flashinfer-ba', 'unified')
                    else:
                        if decode_kv_tokens <= 2834432.0:
                            return ('flashinfer-ba', 'unified')
                        else:
                            return ('vllm-fa3', 'split')
            else:
                if num_seqs <= 21.5:
                    if num_seqs <= 5.5:
                        if total_kv_tokens <= 27051.5:
                            return ('vllm-fa3', 'split')
                        else:
                            return ('flashinfer-ba', 'unified')
                    else:
                        return ('flashinfer', 'split')
                else:
                    if prefill_tokens <= 384.0:
                        return ('vllm-fa3', 'split')
                    else:
                        if max_kv_len <= 12544.0:
                            return ('flashinfer-ba', 'unified')
                        else:
                            return ('flashinfer', 'split')
