"""A dispatch rule's features of one step, its domain and its tree's walk: written once, for the fit and the export.

Why a module of the standard library alone that imports nothing: `rule fit` computes FEATURES from
the rows' totals (`feature_values`), and the exported rule.py must compute the same from the lengths
an engine knows before a step runs (`step_features`), refuse what the fit never saw (`refusal`) and
walk the same tree (`walk`). rule.py embeds this module's source as it is (results/rule_export.py),
so the export and the fit cannot drift apart; tests/test_rule_export.py runs the export on every
fitted cell and compares it with the fit's own predictions.
"""

from __future__ import annotations

# name -> meaning; a decode row counts one query token, and a speculative row's drafts count with
# prefill_tokens (the rows carry the batch's totals, not each row's query length; step_features'
# draft_tokens argument counts them the same way)
FEATURES = {
    "decode_rows": "decode rows (sequences sent to the decode kernel by split)",
    "prefill_tokens": "query tokens of the other rows (prefill chunks), plus speculative drafts",
    "decode_share": "decode rows over all query tokens",
    "num_seqs": "sequences in the step",
    "total_kv_tokens": "KV tokens of every sequence, summed",
    "max_kv_len": "the longest sequence's KV length",
    "mean_kv_len": "total KV tokens over sequences",
    "decode_kv_tokens": "KV tokens of the decode rows, summed (what split's decode kernel reads)",
    "mean_decode_kv_len": "decode_kv_tokens over decode rows",
    "prefill_kv_tokens": "KV tokens of the other rows, summed",
    "max_prefill_query_len": "the longest prefill chunk's query tokens",
    "decode_query_len": "the decode rows' query tokens each: 1, or 1 + the drafts with speculative decoding "
                        "(0 without decode rows)",
    "num_heads": "query heads",
    "gqa_group": "query heads per KV head",
    "head_dim": "head dim",
}


def feature_values(decode_rows, query_tokens, num_seqs, total_kv, max_kv, num_heads, num_kv_heads, head_dim,
                   decode_kv=None, max_prefill_query=None, decode_query=None) -> dict:
    """FEATURES of one batch from its sizes; without decode_kv, max_prefill_query or decode_query
    (rows older than those columns), the features read off them are NaN."""
    nan = float("nan")
    return {"decode_rows": decode_rows, "prefill_tokens": query_tokens - decode_rows,
            "decode_share": decode_rows / query_tokens if query_tokens else 0.0, "num_seqs": num_seqs,
            "total_kv_tokens": total_kv, "max_kv_len": max_kv, "mean_kv_len": total_kv / num_seqs if num_seqs else 0.0,
            "decode_kv_tokens": nan if decode_kv is None else decode_kv,
            "mean_decode_kv_len": nan if decode_kv is None else decode_kv / decode_rows if decode_rows else 0.0,
            "prefill_kv_tokens": nan if decode_kv is None else total_kv - decode_kv,
            "max_prefill_query_len": nan if max_prefill_query is None else max_prefill_query,
            "decode_query_len": nan if decode_query is None else decode_query,
            "num_heads": num_heads, "gqa_group": num_heads / num_kv_heads if num_kv_heads else 0.0,
            "head_dim": head_dim}


def step_features(decode_kv_lens, prefill_query_lens, prefill_kv_lens, num_heads, num_kv_heads, head_dim,
                  draft_tokens=0) -> dict:
    """FEATURES of one step from its lengths, counted as the rows count them: each decode row one
    query token in decode_rows, the step's draft tokens (summed over its decode rows, which share one
    count) with the batch's query tokens."""
    decode_rows = len(decode_kv_lens)
    kv_lens = list(decode_kv_lens) + list(prefill_kv_lens)
    return feature_values(decode_rows, decode_rows + sum(prefill_query_lens) + draft_tokens, len(kv_lens),
                          sum(kv_lens), max(kv_lens, default=0), num_heads, num_kv_heads, head_dim,
                          decode_kv=sum(decode_kv_lens), max_prefill_query=max(prefill_query_lens, default=0),
                          decode_query=1 + draft_tokens / decode_rows if decode_rows else 0)


def refusal(shapes, max_decode_query_len, num_heads, num_kv_heads, head_dim, decode_query_len):
    """Why a rule of this domain does not answer for a step (another attention shape, or decode rows
    with more drafts than it was fitted on), or None where it answers. No limit on the decode query
    length where the domain has none (None: the rows could not tell it)."""
    fitted = sorted(tuple(shape) for shape in shapes)
    if (num_heads, num_kv_heads, head_dim) not in fitted:
        return (f"this rule was fitted on (heads, KV heads, head dim) in {fitted}, not "
                f"{(num_heads, num_kv_heads, head_dim)}: fit one on rows of that shape")
    if max_decode_query_len is not None and decode_query_len > max_decode_query_len:
        return (f"this rule was fitted on decode rows of at most {max_decode_query_len} query token(s) "
                f"({max_decode_query_len - 1} draft(s)), not {decode_query_len:g}: fit one on a replay of this "
                "speculative decoding")
    return None


def walk(node, values) -> dict:
    """The leaf a step's feature values reach (`le`: the value is at most the threshold)."""
    while "choice" not in node:
        node = node["le"] if values[node["feature"]] <= node["threshold"] else node["gt"]
    return node
