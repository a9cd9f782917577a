"""rule.py, rendered from a checked rule.json: fixed code, the shared feature code, and the rule's values as literals.

Why this way: rule.py is Python that a serving engine imports, and what it holds comes from rows
someone else measured (a GPU name, a library version, a mode). So nothing read from a run becomes
code: the code of rule.py is this module's template and the source of results/rule_features.py
(embedded as it is, so the export computes FEATURES, refuses outside the domain and walks the tree
exactly as the fit does), and the rule itself (its tree, domain, GPU, library versions, mode and
choices) is data, each value written by repr() after rule_schema.check_rule has checked it, and
read back by ast.literal_eval to be sure the module holds those values and nothing else.
"""

from __future__ import annotations

import ast
import inspect

from attnbench.results import rule_features
from attnbench.results.rule_schema import check_rule

HEADER = '''"""A dispatch rule fitted by `attnbench rule fit`: choose(...) gives (backend, strategy) for one step.

Standard library only: paste this file into a serving engine. The rule holds for the GPU, the
library versions and the timing mode below (GPU, LIBRARY_VERSIONS, MODE), and it answers only for
what it was fitted on: another attention shape (SHAPES), or decode rows with more query tokens than
it saw (MAX_DECODE_QUERY_LEN: 1 + drafts), is a ValueError (the engine's own default is the answer
there), not a guess. The code below the data is attnbench's own (its rule features, the domain's
check and the tree's walk, the same code the fit ran); the rule itself is data: TREE and the rest,
Python literals written from the rule.json beside this file.
"""

from __future__ import annotations
'''

CHOOSE = '''

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
'''


def rule_data(record: dict) -> dict[str, object]:
    """The names rule.py binds to the rule's values, from a checked rule.json."""
    domain = record["domain"]
    return {"TREE": record["tree"], "SHAPES": [tuple(shape) for shape in domain["shapes"]],
            "MAX_DECODE_QUERY_LEN": domain["max_decode_query_len"], "CHOICES": list(record["choices"]),
            "GPU": list(record["gpu"]), "LIBRARY_VERSIONS": dict(record["library_versions"]),
            "MODE": record["fit"]["mode"], "MAX_DEPTH": record["fit"]["max_depth"]}


def features_source() -> str:
    """rule_features.py's code, less its module docstring and its __future__ import (rule.py has its own)."""
    source = inspect.getsource(rule_features)
    future = next(node for node in ast.parse(source).body if isinstance(node, ast.ImportFrom)
                  and node.module == "__future__")
    return "".join(source.splitlines(keepends=True)[future.end_lineno:])


def rule_py(record: dict) -> str:
    """rule.py's text for rule.json `record` (checked here again); every value a literal, read back."""
    data = rule_data(check_rule(record))
    literals = "".join(f"{name} = {literal(value)}\n" for name, value in data.items())
    text = (HEADER + features_source() + "\n\n# The rule, as data (Python literals written from rule.json):\n"
            + literals + CHOOSE)
    _check_literals(text, data)
    return text


def literal(value: object, indent: int = 0) -> str:
    """`value` (dicts, lists, tuples, strings, numbers, None) as a Python literal made of repr()s, one
    entry a line where it holds containers or runs long, indented as a reader expects."""
    if isinstance(value, (dict, list)) and value:
        flat = repr(value)
        entries = value.values() if isinstance(value, dict) else value
        if len(flat) + indent <= 100 and not any(isinstance(v, (dict, list)) for v in entries):
            return flat
        pad, (opening, closing) = " " * (indent + 4), ("{}" if isinstance(value, dict) else "[]")
        items = [f"{k!r}: {literal(v, indent + 4)}" for k, v in value.items()] if isinstance(value, dict) \
            else [literal(v, indent + 4) for v in value]
        return opening + "\n" + "".join(f"{pad}{item},\n" for item in items) + " " * indent + closing
    return repr(value)


def _check_literals(text: str, data: dict[str, object]) -> None:
    """rule.py binds each name of `data` once, to a literal equal to the value (read by ast.literal_eval,
    which evaluates no code); anything else is a bug in the rendering, never written."""
    bound = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and getattr(node.targets[0], "id", None) in data:
            bound.setdefault(node.targets[0].id, []).append(ast.literal_eval(node.value))
    for name, value in data.items():
        if bound.get(name) != [value]:
            raise AssertionError(f"rule.py would not bind {name} to its value alone")
