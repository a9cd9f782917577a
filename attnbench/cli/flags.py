"""Flag values -> typed arguments: one parser for the command line and for scenario files."""

from __future__ import annotations

import dataclasses
import itertools
import re

from attnbench.errors import AttnbenchError, UsageError
from attnbench.kernels.plan import KernelArgs

# kernel flags parsed into a list-valued KernelArgs field:
# flag -> (field, element type, None when empty)
LIST_FLAGS = {"tokens": ("tokens", int, True), "kind": ("kinds", str, False), "strategy": ("strategies", str, False),
              "backend": ("backends", str, True), "mode": ("modes", str, True),
              "prefix_ratio": ("prefix_ratios", float, False)}

def parse_list(text: str, flag: str, cast=int) -> list:
    try:
        values = [cast(part.strip()) for part in str(text).split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{flag}: expected a comma-separated list of {cast.__name__}s, got {text!r}") from None
    if not values:
        raise UsageError(f"{flag}: empty list")
    return values


def parse_shapes(shapes: str | None, heads: str | None, dim: str | None) -> list[tuple[int, int]]:
    """(heads, head dim) pairs: --shapes 12x64,32x128, or the product of --heads and --dim."""
    if shapes:
        pairs = []
        for part in shapes.split(","):
            m = re.fullmatch(r"\s*(\d+)x(\d+)\s*", part)
            if not m:
                raise UsageError(f"--shapes: expected HEADSxDIM pairs such as 12x64,32x128, got {part!r}")
            pairs.append((int(m.group(1)), int(m.group(2))))
        return pairs
    if heads is None or dim is None:
        raise UsageError("--heads and --dim: both are needed (or --shapes 32x128,...), e.g. --heads 32 --dim 128")
    return list(itertools.product(parse_list(heads, "--heads"), parse_list(dim, "--dim")))


def kernel_args(values: dict) -> KernelArgs:
    """KernelArgs from the kernel command's parameter values (the CLI's, or a scenario's)."""
    fields = {f.name for f in dataclasses.fields(KernelArgs)}
    args = {"shapes": parse_shapes(values["shapes"], values["heads"], values["dim"])}
    for param, value in values.items():
        if param in ("shapes", "heads", "dim"):
            continue
        if param in LIST_FLAGS:
            field, cast, optional = LIST_FLAGS[param]
            empty = value is None or value == ""
            args[field] = None if empty and optional else parse_list(value, "--" + param.replace("_", "-"), cast)
        elif param in fields:
            args[param] = value
        else:
            raise AttnbenchError(f"the kernel flag {param!r} has no KernelArgs field: "
                                 "attnbench.cli.flags.kernel_args needs to learn it")
    return KernelArgs(**args)
