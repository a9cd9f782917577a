"""`attnbench history add/list` and `attnbench dashboard`: runs kept over commits, and their site.

Thin: the jobs are runs/history.py and runs/dashboard.py, imported when a command runs (the site
brings plotly and ruptures: the `dashboard` extra). The guide is docs/guides/dashboard.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from attnbench.cli.common import user_errors
from attnbench.results.changepoints import MIN_CHANGE, PENALTY
from attnbench.console import make_console
from attnbench.errors import UsageError

app = typer.Typer(no_args_is_help=True, help="A history of runs over commits: file a run, list what is filed.")

History = Annotated[Path, typer.Option(help="The history directory (made by the first `history add`). "
                                            "Example: --history bench-history")]


@app.command("add")
def add(
    run: Annotated[Path, typer.Argument(help="A finished run's directory (results.csv and env.json): a kernel sweep, "
                                             "scenario, e2e, replay or atlas run.")],
    history: History,
    commit: Annotated[Optional[str], typer.Option(help="The commit to file the run under (default: env.json's "
                                                       "git_sha). Example: --commit $GITHUB_SHA")] = None,
    date: Annotated[Optional[str], typer.Option(help="The date to file it under, ISO 8601 (default: env.json's "
                                                     "timestamp); CI passes the commit's date. Example: --date "
                                                     "2026-12-01T20:00:00+00:00")] = None,
    replace: Annotated[bool, typer.Option(help="File it again over an entry with the same commit, date, GPU, "
                                               "libraries and rows. Example: --replace")] = False,
) -> None:
    """File a run into a history directory: one entry per run, keyed by commit, date, GPU and library versions.

    The run's results.csv and env.json are checked as every tool reads them, then copied into HISTORY/runs/<id>/ (with the atlas's cells.csv when the run has one) and listed in HISTORY/index.json. The run itself is only read. The same run filed twice is refused unless --replace.

    Example: attnbench history add results/new --history bench-history --commit $GITHUB_SHA
    """
    from attnbench.runs.history import add as add_run

    console = make_console()
    with user_errors(console):
        entry, replaced = add_run(run, history, commit, date, replace)
    console.print(f"{'replaced' if replaced else 'filed'} {escape(entry.id)}: {entry.kind} run, commit "
                  f"{escape(entry.commit[:12])}, {escape(entry.date)}, {escape(entry.gpu)}, {entry.rows} rows",
                  highlight=False)


@app.command("list")
def list_entries(history: History) -> None:
    """List a history's entries, oldest first: id, date, commit, GPU, kind of run, rows, libraries.

    Example: attnbench history list --history bench-history
    """
    from attnbench.runs.history import entries

    console = make_console()
    with user_errors(console):
        found = entries(history)
    table = Table("id", "date", "commit", "gpu", "kind", "rows", "libraries", title=f"{len(found)} runs")
    for e in found:
        table.add_row(escape(e.id), escape(e.date), escape(e.commit[:12]), escape(e.gpu), e.kind, str(e.rows),
                      escape(", ".join(f"{k} {v}" for k, v in e.libraries.items())))
    console.print(table)


def dashboard(
    history: Annotated[Path, typer.Argument(help="A history directory (attnbench history add).")],
    out: Annotated[Path, typer.Option(help="A new or empty directory for the site (index.html). Example: --out site")],
    force: Annotated[bool, typer.Option(help="Write into --out anyway, removing only what attnbench wrote there. "
                                             "Example: --force")] = False,
    penalty: Annotated[float, typer.Option(help="Change points: the cost a change must save, times ln(runs), in "
                                                "noise units; higher finds fewer. Example: --penalty 3")] = PENALTY,
    min_change: Annotated[str, typer.Option(help="Change points: the smallest change between the medians either "
                                                 "side that counts. Example: --min-change 2%")] = f"{MIN_CHANGE:.0%}",
    plotly_js: Annotated[Optional[Path], typer.Option(help="Inline this plotly.js dist file (same version as the "
                                                           "installed plotly) instead of the full bundle: a partial "
                                                           "bundle loads faster (docs/guides/dashboard.md). Example: "
                                                           "--plotly-js package/plotly-basic.min.js")] = None,
) -> None:
    """Write a history as a static site: trends per row with intervals, change points, filters, the latest runs.

    SITE/index.html carries Plotly, the data and its script inline, so it opens from file:// and from GitHub Pages with no server and no network. Change points are found per series with PELT (ruptures) on log times in noise units (docs/guides/dashboard.md).

    Example: attnbench dashboard bench-history --out site
    """
    from attnbench.results.compare import parse_threshold
    from attnbench.results.dashboard_data import Settings
    from attnbench.runs.dashboard import build

    console = make_console()
    with user_errors(console):
        needs_extra()
        if not penalty > 0 or penalty > 1e6:
            raise UsageError(f"--penalty: must be a positive number, got {penalty}")
        try:
            smallest = parse_threshold(min_change)
        except UsageError as exc:
            raise UsageError(str(exc).replace("--threshold", "--min-change")) from None
        written = build(history, out, force, Settings(penalty, smallest), plotly_js)
    console.print(f"site: {escape(str(written))}", highlight=False)


def needs_extra() -> None:
    """The site's libraries, or one line saying how to install them."""
    import importlib.util

    missing = [name for name in ("plotly", "ruptures") if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(f"dashboard needs {' and '.join(missing)}: pip install -e \".[dashboard]\"")
