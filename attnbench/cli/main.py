"""The attnbench command line: the Typer app and its commands, each from its own module.

Why a module of its own: the commands import what they run, and nothing imports this module
back, so the app can list every command explicitly.
"""

from __future__ import annotations

import typer

from attnbench.cli import e2e, kernel, results, run

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Benchmark LLM attention kernels: one paged varlen call (unified) vs kvcache + varlen (split).")

app.command()(kernel.kernel)
app.command()(kernel.backends)
app.command("e2e")(e2e.e2e)
app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(run.run)
app.command()(results.compare)
app.command()(results.export)
app.command()(results.plot)


def main() -> None:
    app()
