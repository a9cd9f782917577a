"""notebooks/attnbench_results.ipynb executed headless (nbclient), as CI runs it, on kernel and e2e runs."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the test extra (nbformat, nbclient, ipykernel) is not installed")
nbclient = pytest.importorskip("nbclient", reason="the test extra (nbformat, nbclient, ipykernel) is not installed")
pytest.importorskip("ipykernel", reason="the test extra (nbformat, nbclient, ipykernel) is not installed")

pytest_plugins = ["results_fixtures"]

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "attnbench_results.ipynb"
def leftovers() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("attnbench-plots-*"))


def execute(results: Path, compare_with: list[Path]):
    """Run the notebook with its parameters set the papermill way: a cell after the tagged one."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(
        f"RESULTS = {str(results)!r}\nCOMPARE_WITH = {[str(p) for p in compare_with]!r}"))
    before = leftovers()
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    assert leftovers() <= before, "the notebook left a plot directory in the temporary directory"
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    return [o.get("data", {}) for o in outputs]


def test_the_committed_notebook_has_no_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_notebook_draws_the_table_plots_and_comparison(results_dir):
    data = execute(results_dir, [results_dir])
    assert sum("image/png" in d for d in data) >= 2  # a latency and a ratio plot at least
    html = "\n".join(d.get("text/html", "") for d in data)
    assert "split / unified" in html and "unified ms" in html  # the seed-shaped table
    markdown = "\n".join(d.get("text/markdown", "") for d in data)
    assert "attnbench compare: no regression" in markdown  # compared with itself


def test_notebook_reads_an_e2e_run(e2e_run):
    data = execute(e2e_run, [e2e_run])
    assert sum("image/png" in d for d in data) == 2  # e2e_latency.png and e2e_ratio.png
    html = "\n".join(d.get("text/html", "") for d in data)
    assert "unified p50 s" in html and "split / unified" in html
    markdown = "\n".join(d.get("text/markdown", "") for d in data)
    assert "an e2e run" in markdown and "attnbench compare: no regression" in markdown
