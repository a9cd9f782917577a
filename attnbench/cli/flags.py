"""Flag values -> typed arguments: one parser for the command line and for scenario files.

A list flag is a comma-separated string on the command line and a string, a number or a list in
a scenario file; both become the same typed list here, and the args' validators
(kernels.plan.plan_sweep, e2e.runner.validate_args) then check every value.
"""

from __future__ import annotations

import dataclasses
import itertools
import re

from attnbench.e2e.runner import E2EArgs
from attnbench.errors import AttnbenchError, UsageError
from attnbench.kernels.plan import KernelArgs, check_unique, shape_text

# kernel flags parsed into a list-valued KernelArgs field:
# flag -> (field, element type, None when empty)
LIST_FLAGS = {"tokens": ("tokens", int, True), "kind": ("kinds", str, False), "strategy": ("strategies", str, False),
              "backend": ("backends", str, True), "mode": ("modes", str, True),
              "prefix_ratio": ("prefix_ratios", float, False), "decode_share": ("decode_shares", float, False),
              "decode_seqs": ("decode_seqs", int, True)}
E2E_LIST_FLAGS = {"input_len": ("input_lens", int, False), "output_len": ("output_lens", int, False),
                  "batch_size": ("batch_sizes", int, False), "strategy": ("strategies", str, False),
                  "backend": ("backends", str, True)}

def parse_list(text: str, flag: str, cast=int) -> list:
    try:
        values = [cast(part.strip()) for part in str(text).split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{flag}: expected a comma-separated list of {cast.__name__}s, got {text!r}") from None
    if not values:
        raise UsageError(f"{flag}: empty list")
    return values


def parse_shapes(shapes: str | None, heads: str | None, dim: str | None) -> list[tuple[int, ...]]:
    """(heads, head dim) pairs: --shapes 12x64,32x128, or the product of --heads and --dim. A shape
    written HEADS/KVxDIM (32/8x128) is (heads, dim, kv heads): its own kv heads, over --kv-heads."""
    if shapes:
        pairs = []
        for part in shapes.split(","):
            m = re.fullmatch(r"\s*(\d+)(?:/(\d+))?x(\d+)\s*", part)
            if not m:
                raise UsageError(f"--shapes: expected HEADSxDIM or HEADS/KVxDIM such as 12x64,32/8x128, got {part!r}")
            pairs.append((int(m.group(1)), int(m.group(3)), *([int(m.group(2))] if m.group(2) else [])))
        check_unique(pairs, "--shapes", shape_text)
        return pairs
    if heads is None or dim is None:
        raise UsageError("--heads and --dim: both are needed (or --shapes 32x128,...), e.g. --heads 32 --dim 128")
    heads_list, dims = parse_list(heads, "--heads"), parse_list(dim, "--dim")
    check_unique(heads_list, "--heads")
    check_unique(dims, "--dim")
    return list(itertools.product(heads_list, dims))


def typed_fields(values: dict, cls, list_flags: dict, command: str) -> dict:
    """The fields of `cls` from a command's parameter values: list flags parsed, the rest as given."""
    fields = {f.name for f in dataclasses.fields(cls)}
    args = {}
    for param, value in values.items():
        if param in list_flags:
            field, cast, optional = list_flags[param]
            empty = value is None or value == ""
            args[field] = None if empty and optional else parse_list(value, "--" + param.replace("_", "-"), cast)
        elif param in fields:
            args[param] = value
        else:
            raise AttnbenchError(f"the {command} flag {param!r} has no {cls.__name__} field: "
                                 "attnbench.cli.flags needs to learn it")
    return args


def kernel_args(values: dict) -> KernelArgs:
    """KernelArgs from the kernel command's parameter values (the CLI's, or a scenario's)."""
    rest = {k: v for k, v in values.items() if k not in ("shapes", "heads", "dim")}
    return KernelArgs(shapes=parse_shapes(values["shapes"], values["heads"], values["dim"]),
                      **typed_fields(rest, KernelArgs, LIST_FLAGS, "kernel"))


def e2e_args(values: dict) -> E2EArgs:
    """E2EArgs from the e2e command's parameter values (the CLI's, or a scenario's)."""
    return E2EArgs(**typed_fields(values, E2EArgs, E2E_LIST_FLAGS, "e2e"))
