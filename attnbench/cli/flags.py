"""A command's flags as data, read from the command's own declaration, for scenario files.

`attnbench kernel` and `attnbench e2e` hand their parsed flags to KernelArgs / E2EArgs by name
(click's ctx.params: the fields are named like the flags). A scenario file has no command line,
so its values go through the same declarations here: names, types and defaults from the click
options, and each list flag's parser from its typer.Option (cli/options.py), then into the same
args object. A flag added to a command is a scenario key at once, with nothing to add here.
The args classes are imported when one is built: reading the flags needs no torch.
"""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Callable

import typer
import typer.main

from attnbench.cli import e2e, kernel
from attnbench.errors import AttnbenchError

if TYPE_CHECKING:
    from attnbench.e2e.runner import E2EArgs
    from attnbench.kernels.plan import KernelArgs

# command name -> the function behind it (args_class: the args object it fills)
COMMANDS = {"kernel": kernel.kernel, "e2e": e2e.e2e}


@dataclass(frozen=True)
class Flag:
    key: str               # the long option with underscores: kv_heads, json
    param: str             # the command function's parameter and the args field: kv_heads, json
    type: str              # from the annotation: text, integer, float, boolean or path
    default: object        # as the command line would give it: "unified,split" for a list flag
    negative: str | None   # --no-causal, for on/off flags that have one
    parse: Callable        # the declaration's parser (list flags), else the value as it is


def _type_of(hint) -> str:
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return {bool: "boolean", int: "integer", float: "float", str: "text"}.get(
        hint, "path" if isinstance(hint, type) and issubclass(hint, PurePath) else "text")


def _parser(hint) -> Callable:
    declared = [getattr(info, "parser", None) for info in typing.get_args(hint)[1:]]
    return next((parse for parse in declared if parse is not None), lambda value: value)


@functools.cache
def command_flags(command: str) -> dict[str, Flag]:
    """The flags of `attnbench COMMAND`: names and defaults from its click options, types and
    parsers from its function's annotations."""
    callback = COMMANDS[command]
    hints = typing.get_type_hints(callback, include_extras=True)
    single = typer.Typer()
    single.command()(callback)
    click_command = typer.main.get_command(single)  # one command: the click command itself
    flags = {}
    for p in click_command.params:
        if p.param_type_name != "option" or p.name not in hints:
            continue
        key = p.opts[0].lstrip("-").replace("-", "_")
        flags[key] = Flag(key, p.name, _type_of(hints[p.name]), p.default, (p.secondary_opts or [None])[0],
                          _parser(hints[p.name]))
    return flags


def command_args(command: str, values: dict):
    """The command's args object from flag values by parameter name (the file's, or partial):
    each parsed by its flag's declaration; a flag not given keeps the args' default."""
    flags = {f.param: f for f in command_flags(command).values()}
    unknown = sorted(set(values) - set(flags))
    if unknown:
        raise AttnbenchError(f"{unknown[0]!r} is not a flag of attnbench {command}")
    return args_class(command)(**{name: flags[name].parse(value) for name, value in values.items()})


def args_class(command: str) -> type:
    """The args object `attnbench COMMAND` fills, imported now (it brings the command's domain, torch too)."""
    if command == "kernel":
        from attnbench.kernels.plan import KernelArgs
        return KernelArgs
    from attnbench.e2e.runner import E2EArgs
    return E2EArgs


def kernel_args(values: dict) -> KernelArgs:
    return command_args("kernel", values)


def e2e_args(values: dict) -> E2EArgs:
    return command_args("e2e", values)
