"""A dispatch rule fitted by `attnbench rule fit`: choose(...) gives (backend, strategy) for one step.

Standard library only: paste this file into a serving engine. The rule holds for the GPU, the
library versions and the timing mode below (GPU, LIBRARY_VERSIONS, MODE), and it answers only for
what it was fitted on: another attention shape (SHAPES), or decode rows with more query tokens than
it saw (MAX_DECODE_QUERY_LEN: 1 + drafts), is a ValueError (the engine's own default is the answer
there), not a guess. The code below the data is attnbench's own (its rule features, the domain's
check and the tree's walk, the same code the fit ran); the rule itself is data: TREE and the rest,
Python literals written from the rule.json beside this file.
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


# The rule, as data (Python literals written from rule.json):
TREE = {
    'feature': 'decode_share',
    'threshold': 0.2386128380894661,
    'le': {
        'feature': 'max_prefill_query_len',
        'threshold': 60.0,
        'le': {
            'feature': 'prefill_tokens',
            'threshold': 26.5,
            'le': {
                'feature': 'total_kv_tokens',
                'threshold': 3944.0,
                'le': {
                    'feature': 'prefill_tokens',
                    'threshold': 15.5,
                    'le': {
                        'feature': 'total_kv_tokens',
                        'threshold': 532.0,
                        'le': {'choice': 'vllm-fa2 split', 'cells': 32, 'weight': 16.207572965228852},
                        'gt': {'choice': 'vllm-fa3 unified', 'cells': 7, 'weight': 37.38505524916748},
                    },
                    'gt': {'choice': 'flashinfer-ba unified', 'cells': 3, 'weight': 22.403218136150365},
                },
                'gt': {
                    'feature': 'mean_decode_kv_len',
                    'threshold': 213.0,
                    'le': {'choice': 'vllm-fa3 split', 'cells': 16, 'weight': 8.103786482614426},
                    'gt': {'choice': 'vllm-fa3 unified', 'cells': 7, 'weight': 36.82704098153524},
                },
            },
            'gt': {
                'feature': 'decode_rows',
                'threshold': 12.0,
                'le': {
                    'feature': 'num_seqs',
                    'threshold': 6.0,
                    'le': {
                        'feature': 'mean_decode_kv_len',
                        'threshold': 1613.875,
                        'le': {'choice': 'vllm-fa3 unified', 'cells': 18, 'weight': 19.990006795296985},
                        'gt': {
                            'choice': 'flashinfer-ba unified',
                            'cells': 2,
                            'weight': 3.1299821957141356,
                        },
                    },
                    'gt': {'choice': 'flashinfer-ba unified', 'cells': 31, 'weight': 267.1923559935681},
                },
                'gt': {
                    'feature': 'max_prefill_query_len',
                    'threshold': 54.5,
                    'le': {'choice': 'vllm-fa3 unified', 'cells': 3, 'weight': 15.74676646425835},
                    'gt': {'choice': 'flashinfer-ba unified', 'cells': 1, 'weight': 2.446917341116192},
                },
            },
        },
        'gt': {
            'feature': 'prefill_kv_tokens',
            'threshold': 595.0,
            'le': {
                'feature': 'decode_share',
                'threshold': 0.0445867907255888,
                'le': {
                    'feature': 'max_kv_len',
                    'threshold': 2114.5,
                    'le': {
                        'feature': 'mean_decode_kv_len',
                        'threshold': 1541.2115478515625,
                        'le': {'choice': 'vllm-fa3 unified', 'cells': 91, 'weight': 464.56377643751665},
                        'gt': {'choice': 'flashinfer split', 'cells': 1, 'weight': 34.69360618830251},
                    },
                    'gt': {
                        'feature': 'prefill_kv_tokens',
                        'threshold': 497.5,
                        'le': {'choice': 'vllm-fa3 unified', 'cells': 14, 'weight': 72.41601843923277},
                        'gt': {
                            'choice': 'flashinfer-ba unified',
                            'cells': 33,
                            'weight': 279.86563246698967,
                        },
                    },
                },
                'gt': {
                    'feature': 'num_seqs',
                    'threshold': 19.5,
                    'le': {
                        'feature': 'max_prefill_query_len',
                        'threshold': 206.0,
                        'le': {'choice': 'vllm-fa3 unified', 'cells': 2, 'weight': 9.823378708055586},
                        'gt': {
                            'choice': 'flashinfer-ba unified',
                            'cells': 7,
                            'weight': 26.140099099352298,
                        },
                    },
                    'gt': {
                        'feature': 'mean_kv_len',
                        'threshold': 780.0784912109375,
                        'le': {'choice': 'vllm-fa3 unified', 'cells': 5, 'weight': 24.29316136393219},
                        'gt': {
                            'choice': 'flashinfer-ba unified',
                            'cells': 39,
                            'weight': 199.26133169640417,
                        },
                    },
                },
            },
            'gt': {
                'feature': 'num_seqs',
                'threshold': 8.5,
                'le': {
                    'feature': 'max_prefill_query_len',
                    'threshold': 407.5,
                    'le': {
                        'feature': 'decode_kv_tokens',
                        'threshold': 2931.5,
                        'le': {'choice': 'flashinfer unified', 'cells': 21, 'weight': 55.960928207614714},
                        'gt': {'choice': 'vllm-fa3 unified', 'cells': 54, 'weight': 248.71628884955663},
                    },
                    'gt': {
                        'feature': 'prefill_kv_tokens',
                        'threshold': 7241.0,
                        'le': {'choice': 'vllm-fa3 split', 'cells': 134, 'weight': 485.2470066686467},
                        'gt': {'choice': 'vllm-fa3 unified', 'cells': 40, 'weight': 42.2965953657277},
                    },
                },
                'gt': {
                    'feature': 'prefill_kv_tokens',
                    'threshold': 1124.5,
                    'le': {
                        'feature': 'max_kv_len',
                        'threshold': 5774.5,
                        'le': {'choice': 'vllm-fa3 unified', 'cells': 81, 'weight': 309.1438305306295},
                        'gt': {'choice': 'flashinfer split', 'cells': 12, 'weight': 55.423223810451795},
                    },
                    'gt': {'choice': 'vllm-fa3 unified', 'cells': 305, 'weight': 1344.7773316670693},
                },
            },
        },
    },
    'gt': {
        'feature': 'total_kv_tokens',
        'threshold': 6658.5,
        'le': {
            'feature': 'mean_decode_kv_len',
            'threshold': 1898.75,
            'le': {
                'feature': 'prefill_kv_tokens',
                'threshold': 1.0,
                'le': {
                    'feature': 'max_kv_len',
                    'threshold': 534.5,
                    'le': {
                        'feature': 'decode_rows',
                        'threshold': 4.0,
                        'le': {'choice': 'vllm-fa2 split', 'cells': 14, 'weight': 214.49974118589353},
                        'gt': {'choice': 'vllm-fa3 split', 'cells': 3, 'weight': 1.519459965490205},
                    },
                    'gt': {
                        'feature': 'decode_rows',
                        'threshold': 9.5,
                        'le': {'choice': 'vllm-fa3 split', 'cells': 206, 'weight': 9326.181055246661},
                        'gt': {
                            'choice': 'flashinfer-ba unified',
                            'cells': 1,
                            'weight': 164.41929107375068,
                        },
                    },
                },
                'gt': {
                    'feature': 'decode_share',
                    'threshold': 0.2678571492433548,
                    'le': {'choice': 'flashinfer-ba unified', 'cells': 2, 'weight': 1.0129733103268033},
                    'gt': {
                        'feature': 'decode_share',
                        'threshold': 0.5357142984867096,
                        'le': {'choice': 'vllm-fa3 unified', 'cells': 10, 'weight': 8.928223987458956},
                        'gt': {'choice': 'flashinfer-ba unified', 'cells': 5, 'weight': 4.344641109542968},
                    },
                },
            },
            'gt': {
                'feature': 'total_kv_tokens',
                'threshold': 4087.0,
                'le': {
                    'feature': 'total_kv_tokens',
                    'threshold': 2327.5,
                    'le': {'choice': 'vllm-fa3 split', 'cells': 1, 'weight': 21.661631507568416},
                    'gt': {'choice': 'flashinfer split', 'cells': 18, 'weight': 561.8582711758667},
                },
                'gt': {'choice': 'vllm-fa3 split', 'cells': 15, 'weight': 130.9417335700648},
            },
        },
        'gt': {
            'feature': 'decode_share',
            'threshold': 0.4986187815666199,
            'le': {
                'feature': 'max_kv_len',
                'threshold': 3880.0,
                'le': {
                    'feature': 'max_kv_len',
                    'threshold': 1523.5,
                    'le': {
                        'feature': 'prefill_kv_tokens',
                        'threshold': 45.5,
                        'le': {'choice': 'vllm-fa3 split', 'cells': 1, 'weight': 81.08281550192478},
                        'gt': {
                            'choice': 'flashinfer-ba unified',
                            'cells': 6,
                            'weight': 3.0389199309804096,
                        },
                    },
                    'gt': {
                        'feature': 'mean_decode_kv_len',
                        'threshold': 728.3266906738281,
                        'le': {'choice': 'vllm-fa3 split', 'cells': 1, 'weight': 23.05325599557881},
                        'gt': {
                            'choice': 'flashinfer-ba unified',
                            'cells': 60,
                            'weight': 1348.9257477376295,
                        },
                    },
                },
                'gt': {
                    'feature': 'decode_rows',
                    'threshold': 67.5,
                    'le': {
                        'feature': 'decode_share',
                        'threshold': 0.25337837636470795,
                        'le': {'choice': 'vllm-fa3 split', 'cells': 22, 'weight': 87.43566230597384},
                        'gt': {
                            'choice': 'flashinfer-ba unified',
                            'cells': 14,
                            'weight': 13.496176187149059,
                        },
                    },
                    'gt': {
                        'feature': 'decode_kv_tokens',
                        'threshold': 2834432.0,
                        'le': {
                            'choice': 'flashinfer-ba unified',
                            'cells': 13,
                            'weight': 6.584326517124221,
                        },
                        'gt': {'choice': 'vllm-fa3 split', 'cells': 3, 'weight': 1.519459965490205},
                    },
                },
            },
            'gt': {
                'feature': 'num_seqs',
                'threshold': 21.5,
                'le': {
                    'feature': 'num_seqs',
                    'threshold': 5.5,
                    'le': {
                        'feature': 'total_kv_tokens',
                        'threshold': 27051.5,
                        'le': {'choice': 'vllm-fa3 split', 'cells': 63, 'weight': 1077.450261860603},
                        'gt': {
                            'choice': 'flashinfer-ba unified',
                            'cells': 21,
                            'weight': 60.99402455935453,
                        },
                    },
                    'gt': {'choice': 'flashinfer split', 'cells': 345, 'weight': 8313.256003637716},
                },
                'gt': {
                    'feature': 'prefill_tokens',
                    'threshold': 384.0,
                    'le': {'choice': 'vllm-fa3 split', 'cells': 145, 'weight': 1850.0493838343066},
                    'gt': {
                        'feature': 'max_kv_len',
                        'threshold': 12544.0,
                        'le': {'choice': 'flashinfer-ba unified', 'cells': 9, 'weight': 4.558379896470615},
                        'gt': {'choice': 'flashinfer split', 'cells': 3, 'weight': 1.519459965490205},
                    },
                },
            },
        },
    },
}
SHAPES = [(32, 8, 128)]
MAX_DECODE_QUERY_LEN = 4
CHOICES = [
    'flashinfer split',
    'flashinfer unified',
    'flashinfer-ba unified',
    'vllm-fa2 split',
    'vllm-fa2 unified',
    'vllm-fa3 split',
    'vllm-fa3 unified',
]
GPU = ['NVIDIA H200']
LIBRARY_VERSIONS = {'vllm-fa2': '0.24.0', 'vllm-fa3': '0.24.0', 'flashinfer': '0.6.6', 'flashinfer-ba': '0.6.6'}
MODE = 'graph'
MAX_DEPTH = 6


def choose(decode_kv_lens, prefill_query_lens, prefill_kv_lens, num_heads, num_kv_heads, head_dim, draft_tokens=0):
    """(backend, strategy) for one step: its decode rows' KV lengths, its prefill chunks' query and
    KV lengths, and the attention shape. With speculative decoding, draft_tokens is the step's draft
    tokens summed over its decode rows (each row's query tokens beyond its first; the rows share one
    count): the rows the rule was fitted on count them with the prefill tokens, and so does this
    function. ValueError where the step lies outside what the rule was fitted on."""
    values = step_features(decode_kv_lens, prefill_query_lens, prefill_kv_lens, num_heads, num_kv_heads, head_dim,
                           draft_tokens)
    why = refusal(SHAPES, MAX_DECODE_QUERY_LEN, num_heads, num_kv_heads, head_dim, values["decode_query_len"])
    if why is not None:
        raise ValueError(why)
    backend, strategy = walk(TREE, values)["choice"].split(" ")
    return backend, strategy
