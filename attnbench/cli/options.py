"""The flags that more than one command takes, declared once: type, parser and help text.

A command lists its flags as typed parameters (`backend: options.Backend = None`); Typer reads
the declarations here for `--help` and parsing. A list flag (`--tokens 100,500,1000`) carries its
parser in its declaration, so the command receives a typed list, and a scenario file's value goes
through the same parser (cli/flags.py reads it from the declaration). Where one flag's default
or example differs between commands, a small function returns its declaration.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Callable, Iterable, Optional

import typer

from attnbench.errors import UsageError, check_choices
from attnbench.kernels.choices import DEVICE, known_backends
from attnbench.kernels.workload import DTYPE_ALIASES, STRATEGIES


def parse_list(text: str, flag: str, cast=int) -> list:
    """`8,16,32` -> [8, 16, 32]; a value that is not a `cast` or an empty list names the flag."""
    try:
        values = [cast(part.strip()) for part in str(text).split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{flag}: expected a comma-separated list of {cast.__name__}s, got {text!r}") from None
    if not values:
        raise UsageError(f"{flag}: empty list")
    return values


def list_of(cast, flag: str, optional: bool = False,
            choices: Callable[[], tuple[str, ...] | None] | None = None) -> Callable[[object], list | None]:
    """The parser of a list flag: comma-separated text (or a list already parsed) -> a typed list;
    an empty value is None for an optional flag (the command picks its default) and refused otherwise;
    a flag not given (None) stays None. choices(): the values it takes (None: not known yet), checked
    here, before the command imports what it runs."""
    def parse(value):
        if isinstance(value, (list, tuple)):
            values = list(value)
        elif value is None or (optional and value == ""):
            return None
        else:
            values = parse_list(value, flag, cast)
        allowed = choices() if choices else None
        if allowed is not None:
            check_choices(values, allowed, flag, flag.lstrip("-").replace("-", " "))
        return values
    return parse


def one_of(flag: str, allowed: Callable[[], Iterable[str]], pattern: re.Pattern | None = None,
           hint: str = "") -> Callable[[object], str]:
    """The parser of a flag that takes one name: one of allowed() or matching `pattern`, else one
    line naming the flag and what it takes (`hint`, or the names)."""
    def parse(value) -> str:
        text = str(value)
        if text in allowed() or (pattern is not None and pattern.fullmatch(text)):
            return text
        raise UsageError(f"{flag}: unknown {flag.lstrip('-')} {text!r}; {hint or 'choose ' + ', '.join(allowed())}")
    return parse


def parse_shapes(text) -> list[tuple[int, ...]] | None:
    """--shapes 12x64,32/8x128 -> [(12, 64), (32, 128, 8)]: (heads, head dim) or (heads, head dim,
    kv heads) for a shape written HEADS/KVxDIM."""
    if text is None or text == "":
        return None
    if isinstance(text, (list, tuple)):
        return list(text)
    shapes = []
    for part in str(text).split(","):
        m = re.fullmatch(r"\s*(\d+)(?:/(\d+))?x(\d+)\s*", part)
        if not m:
            raise UsageError(f"--shapes: expected HEADSxDIM or HEADS/KVxDIM such as 12x64,32/8x128, got {part!r}")
        shapes.append((int(m.group(1)), int(m.group(3)), *([int(m.group(2))] if m.group(2) else [])))
    return shapes


Backend = Annotated[Optional[list], typer.Option(
    parser=list_of(str, "--backend", optional=True, choices=known_backends),
    help="Backends (default: every available kernel backend; reference on CPU). Example: --backend vllm-fa2")]
Strategy = Annotated[list, typer.Option(
    parser=list_of(str, "--strategy", choices=lambda: STRATEGIES),
    help="Strategies: unified, split, fused (fused where a backend has it: attnbench backends). "
         "Example: --strategy unified,split,fused")]
Dtype = Annotated[str, typer.Option(parser=one_of("--dtype", lambda: DTYPE_ALIASES, hint="choose bf16 or fp16"),
                                     help="bf16 or fp16. Example: --dtype fp16")]
BlockSize = Annotated[int, typer.Option(help="KV cache block size, a multiple of 16. Example: --block-size 32")]
Device = Annotated[str, typer.Option(parser=one_of("--device", lambda: (), DEVICE, "use auto, cuda, cuda:N or cpu"),
                                      help="auto, cuda, cuda:N or cpu. Example: --device cpu")]
Force = Annotated[bool, typer.Option(help="Write into an --out that holds an earlier run, removing the files attnbench "
                                          "wrote there first (other files stay). Example: --force")]


def seed(used_for: str):
    return typer.Option(help=f"Seed for {used_for}. Example: --seed 1")


def run_out(command: str, example: str):
    """--out of a measuring command: the results directory."""
    return typer.Option(help=f"Results directory (default results/<time>-<gpu>-{command}). Example: --out {example}")


def resume(command: str):
    return typer.Option(help="Finish an interrupted run: the same flags, and the directory it wrote; only the points "
                             "it lacks are measured (refused if the GPU or library versions differ). "
                             f"Example: --resume results/20261130-h200-{command}")


def profile(after: str, breakdown: str):
    return typer.Option(help=f"After {after}: traces for TensorBoard and Perfetto under <out>/profile, kernel "
                             f"breakdown{breakdown} in profile_kernels.csv and profile.md. Example: --profile")


def isolate(point: str, note: str, fails: str):
    return typer.Option(help=f"Run each {point} in a worker process with a watchdog{note}: a point that hangs "
                             f"(past --point-timeout), crashes its process or {fails} and the run goes on. "
                             "Example: --isolate")


def point_timeout(with_flags: str, defaults: str, note: str = ""):
    return typer.Option(help=f"With {with_flags}: the longest a point may go without a result, in seconds "
                             f"({defaults}){note}. Example: --point-timeout 300")
