"""`--help` is rendered by rich, which turns `:name:` into an emoji wherever name is one of its
emoji codes: `uniform:100:400` once printed as `uniform💯400`. No help text, epilog or shown
default of any command may hold such a code."""

from __future__ import annotations

import re

import typer
from rich._emoji_codes import EMOJI
from typer.testing import CliRunner

from attnbench.cli.main import app

# rich's own pattern (rich/_emoji_replace.py), overlapping matches included: `a:b:c:d` holds `:b:` and `:c:`
CODE = re.compile(r"(?=:(\S*?)(?:-(?:emoji|text))?:)")


def commands(command, path=("attnbench",)):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from commands(sub, (*path, name))


def emoji_codes(text: str) -> list[str]:
    return [m.group(1) for m in CODE.finditer(text) if m.group(1).lower() in EMOJI]


def texts(command) -> list[str]:
    out = [command.help or "", command.epilog or ""]
    for param in command.params:
        out.append(getattr(param, "help", None) or "")
        if getattr(param, "show_default", False) or isinstance(param.default, str):
            out.append(str(param.default))
    return out


def test_the_scan_finds_a_planted_code():
    assert emoji_codes("Example: --output-len uniform:100:400") == ["100"]
    assert emoji_codes("--decode-share 0:1:5, lognormal:600:0.8") == []


def test_no_help_text_turns_into_an_emoji():
    found = [(" ".join(path), code, text[:80]) for path, command in commands(typer.main.get_command(app))
             for text in texts(command) for code in emoji_codes(text)]
    assert found == []


def test_the_trace_examples_print_as_written():
    result = CliRunner().invoke(app, ["trace", "synth", "--help"], terminal_width=200)
    assert result.exit_code == 0
    assert "💯" not in result.output and "uniform:" in result.output


def test_the_console_prints_values_as_they_are(capsys):
    from attnbench.console import make_console

    make_console().print("--output-len uniform:100:400")
    assert "uniform:100:400" in capsys.readouterr().out
