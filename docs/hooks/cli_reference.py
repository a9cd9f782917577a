"""The command reference, generated from the live Typer app at every docs build.

Why generated: a hand-written flag list drifts from the code the day a flag is added. This walks
the click command that Typer builds (`typer.main.get_command`) and writes every command, its help
text and every parameter with its type, default and help into `reference/cli.md`.

`cli_reference_markdown` is a plain function (no MkDocs import) so tests/test_docs.py can check
that every command and flag of the app appears in the page; `on_files` is the MkDocs hook that
adds the page to the build.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

APP = "attnbench.cli.main:app"
PAGE = "reference/cli.md"


def load_app(spec: str = APP) -> Any:
    """The Typer app named by `module:attribute`."""
    module, attribute = spec.split(":")
    return getattr(importlib.import_module(module), attribute)


def root_command(app: Any) -> Any:
    """The click group Typer builds from the app."""
    import typer.main

    return typer.main.get_command(app)


def visible_params(command: Any) -> list[Any]:
    """A command's parameters as its --help shows them (hidden ones left out)."""
    return [param for param in command.params if not getattr(param, "hidden", False)]


def type_name(param: Any) -> str:
    """The parameter's type as a word: `int`, `str`, `bool`, `path`, a choice list."""
    bare = getattr(param, "bare_type", None)
    if callable(bare):  # Typer's own copy of click
        return str(bare()).lower()
    click_type = getattr(param, "type", None)
    return str(getattr(click_type, "name", click_type)).lower()


def default_text(param: Any) -> str:
    """The default as a user would type it; flags show the switch that is on by default."""
    if getattr(param, "required", False):
        return "required"
    default = param.default
    if getattr(param, "is_flag", False):
        if param.secondary_opts:
            return f"`{param.opts[0] if default else param.secondary_opts[0]}`"
        return "on" if default else "off"
    if default is None or default == "" or callable(default):
        return "-"
    return f"`{default}`"


CODE_SPAN = re.compile(r"(`[^`]*`)")
PLAIN_ESCAPES = {"<": "&lt;", ">": "&gt;", "*": "\\*", "_": "\\_", "|": "\\|"}


def escape_markdown(text: str) -> str:
    """Help text as literal Markdown: `<time>` must not read as an HTML tag, nor `*` as emphasis.
    Code spans stay as they are (only a pipe is escaped there, for tables)."""
    parts = CODE_SPAN.split(text)
    return "".join(part.replace("|", "\\|") if part.startswith("`")
                   else "".join(PLAIN_ESCAPES.get(char, char) for char in part) for part in parts)


def cell(text: str | None) -> str:
    """Text made safe for one Markdown table cell."""
    return escape_markdown(" ".join((text or "").split()))


def param_names(param: Any) -> str:
    """How the parameter is written on the command line: `--a / --no-a`, or `ARG` for an argument."""
    if param.param_type_name == "argument":
        return f"`{param.name.upper()}`"
    return " / ".join(f"`{opt}`" for opt in [*param.opts, *param.secondary_opts])


def command_section(name: str, command: Any) -> list[str]:
    """One command: its help text, then a table of its parameters."""
    lines = [f"## `attnbench {name}`", "", escape_markdown((command.help or "").strip()), ""]
    params = visible_params(command)
    if not params:
        return [*lines, "No options.", ""]
    lines += ["| option | type | default | help |", "|---|---|---|---|"]
    for param in params:
        lines.append(f"| {param_names(param)} | {type_name(param)} | {default_text(param)} "
                     f"| {cell(getattr(param, 'help', ''))} |")
    return [*lines, ""]


def cli_reference_markdown(app: Any | None = None) -> str:
    """The whole reference page for `app` (default: attnbench's)."""
    root = root_command(app if app is not None else load_app())
    lines = ["# Command reference", "",
             "Generated from the command-line app at build time: every command, its help text and "
             "every option with its type and default. `attnbench COMMAND --help` prints the same.",
             "", escape_markdown((root.help or "").strip()), ""]
    for name, command in visible_commands(root):
        lines += command_section(name, command)
    return "\n".join(lines)


def visible_commands(group: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(`name` or `group sub`, command) for every visible command, a group's subcommands after it."""
    found = []
    for name in sorted(group.commands):
        command = group.commands[name]
        if getattr(command, "hidden", False):
            continue
        found.append((f"{prefix}{name}", command))
        if hasattr(command, "commands"):  # a group (`attnbench trace`): its subcommands follow it
            found += visible_commands(command, f"{prefix}{name} ")
    return found


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: add the generated page to the files being built."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=cli_reference_markdown()))
    return files
