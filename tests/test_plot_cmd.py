"""`attnbench plot`: PNGs redrawn from saved results, several runs overlaid and labelled."""

from __future__ import annotations

import pandas as pd
import pytest

from attnbench.results import export
from attnbench.results import files as report

pytest_plugins = ["results_fixtures"]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def shape_names(df: pd.DataFrame) -> set[str]:
    timed = df[df["verdict"].isin(["pass", "fail"])]
    return {f"h{h}" + (f"kv{kv}" if kv != h else "") + f"_d{d}"
            for h, kv, d in timed[["num_heads", "num_kv_heads", "head_dim"]].drop_duplicates().itertuples(index=False)}


REPLAY_PICTURES = {"replay_per_step", "replay_speedup_cdf", "replay_kind_share"}


def test_one_run_redraws_a_latency_plot_per_shape(results_dir, tmp_path, cli):
    """A replay run (its rows carry a bucket) gets replay's own three pictures instead: its buckets
    are a trace's steps, not a sweep of one shape."""
    result = cli("plot", results_dir, "--out", tmp_path)
    assert result.exit_code == 0, result.output
    drawn = sorted(tmp_path.glob("*.png"))
    if "bucket" in report.load_results(results_dir).columns:
        assert {p.stem for p in drawn} == REPLAY_PICTURES
    else:
        assert {p.stem.removeprefix("latency_") for p in drawn if p.stem.startswith("latency_")} == \
            shape_names(report.load_results(results_dir))
    for png in drawn:
        assert png.read_bytes().startswith(PNG_MAGIC)
        assert str(png) in result.output


def test_several_runs_are_overlaid_under_their_labels(cpu_run, tmp_path, monkeypatch, cli):
    drawn = {}

    def spy(runs, out_dir):
        drawn.update(runs=[(label, len(df)) for label, df in runs], out=out_dir)
        return [out_dir / "latency_x.png"]

    monkeypatch.setattr(export, "plot_runs", spy)
    rows = len(report.load_results(cpu_run))
    result = cli("plot", cpu_run, cpu_run / "results.csv", "--label", "h100", "--label", "h200", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert drawn == {"runs": [("h100", rows), ("h200", rows)], "out": tmp_path}


def test_labels_default_to_directory_names_and_settings_split_lines(cpu_run, tmp_path, monkeypatch, cli):
    other = tmp_path / "longer-context"
    other.mkdir()
    df = report.load_results(cpu_run)
    two = pd.concat([df, df.assign(context=64)], ignore_index=True)
    (other / "results.csv").write_text(two.reindex(columns=report.COLUMNS).to_csv(index=False))
    seen = []
    monkeypatch.setattr(export, "plot_runs", lambda runs, out: seen.extend(label for label, _ in runs) or [out])
    assert cli("plot", cpu_run, other, "--out", tmp_path / "plots").exit_code == 0
    assert seen == [cpu_run.name, "longer-context ctx=32", "longer-context ctx=64"]


@pytest.mark.parametrize("args, message", [
    (["--label", "only-one"], "--label: got 1 label(s) for 2 results"),
])
def test_bad_labels_are_refused(cpu_run, args, message, cli, tmp_path):
    result = cli("plot", cpu_run, cpu_run, *args, "--out", tmp_path)
    assert result.exit_code == 1
    assert result.output.startswith("error: " + message)


def test_a_missing_run_is_refused(tmp_path, cli):
    result = cli("plot", tmp_path / "nope", "--out", tmp_path)
    assert result.exit_code == 1
    assert "does not exist" in result.output


# ---- what the pictures say about themselves: read from matplotlib's objects, not pixels ----------------

@pytest.fixture(autouse=True)
def close_kept_figures():
    """The figures drawn_figures kept open are closed after each test (with pyplot's own close)."""
    import matplotlib.pyplot as plt

    close = plt.close
    yield
    close("all")


def drawn_figures(monkeypatch, draw) -> list:
    """The figures `draw()` makes, kept open (figures.finish closes each after saving it)."""
    import matplotlib.pyplot as plt

    kept = []
    monkeypatch.setattr(plt, "close", kept.append)
    draw()
    return kept


def heading(fig) -> str:
    """The title and the footnote under the legend (libraries, what the bars mean), one line."""
    return " ".join(t.get_text() for t in [fig._suptitle, *fig.texts] if t is not None).replace("\n", " ")


def texts(fig) -> list[str]:
    """Every piece of text on a figure: titles, axis labels, tick labels, legend entries."""
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")) if t.get_text()]


def with_replicates(df: pd.DataFrame) -> pd.DataFrame:
    """The run's rows as if measured with 3 replicates (medians 5 % apart around each median)."""
    cells = [" ".join(f"{m * f:.6g}" for f in (0.95, 1.0, 1.05)) for m in df["median_ms"]]
    return df.assign(replicates=3, replicate_medians_ms=cells)


def kernel_figures(monkeypatch, df, tmp_path):
    return drawn_figures(monkeypatch, lambda: export.plot_results([("", df)], tmp_path))


def test_titles_say_device_libraries_dtype_context_mode_and_that_a_cpu_run_is_a_demo(cpu_run, tmp_path, monkeypatch):
    figs = kernel_figures(monkeypatch, report.load_results(cpu_run), tmp_path)
    assert len(figs) == 2  # latency and ratio for the one shape
    for fig in figs:
        title = fig._suptitle.get_text()
        assert len(title.splitlines()) == 2 and title.splitlines()[1].startswith("CPU: pipeline demo, not a measurement")
        for said in ("4 heads / 2 kv heads, head dim 32", "bfloat16", "context 32", "eager"):
            assert said in title.replace("\n", " "), (said, title)
        assert "reference: torch" in heading(fig) and "reference: torch" not in title


def test_ticks_are_the_swept_values_written_plainly(cpu_run, tmp_path, monkeypatch):
    for fig in kernel_figures(monkeypatch, report.load_results(cpu_run), tmp_path):
        for ax in fig.axes:
            assert list(ax.get_xticks()) == [8, 16]
            assert ax.xaxis.get_major_formatter()(16, 1) == "16"
            assert "query tokens" in ax.get_xlabel() and ax.get_ylabel()


def test_one_legend_names_every_line_and_says_what_reference_is(cpu_run, tmp_path, monkeypatch):
    for fig in kernel_figures(monkeypatch, report.load_results(cpu_run), tmp_path):
        assert len(fig.legends) == 1 and not [ax for ax in fig.axes if ax.get_legend()]
        names = {t.get_text() for t in fig.legends[0].get_texts()}
        assert all("reference (float32 oracle)" in name for name in names)
        lines = {text for ax in fig.axes for text in ax.get_legend_handles_labels()[1]}
        assert lines == names
    ratio = {t.get_text() for t in fig.legends[0].get_texts()}
    assert ratio == {"reference (float32 oracle) eager: split / unified"}


def ratio_axes(figs):
    return [ax for fig in figs for ax in fig.axes if "/ unified" in ax.get_ylabel()]


def test_a_ratio_axis_has_a_line_at_one_and_does_not_zoom_noise_into_a_trend(cpu_run, tmp_path, monkeypatch):
    df = report.load_results(cpu_run)
    df.loc[df["strategy"] == "split", "median_ms"] = df.loc[df["strategy"] == "unified", "median_ms"].values * 1.001
    df[["p10_ms", "p90_ms"]] = df[["median_ms"]].values * [[0.99, 1.01]]
    axes = ratio_axes(kernel_figures(monkeypatch, df, tmp_path))
    assert axes
    for ax in axes:
        assert [line for line in ax.get_lines() if list(line.get_ydata()) == [1.0, 1.0]]
        low, high = ax.get_ylim()
        assert low <= 0.95 and high >= 1.05  # a 0.1 % difference fills a tenth of the panel at most


def test_ratio_plots_carry_intervals_where_replicates_exist(cpu_run, tmp_path, monkeypatch):
    figs = kernel_figures(monkeypatch, with_replicates(report.load_results(cpu_run)), tmp_path)
    axes = ratio_axes(figs)
    assert axes and all(c.has_yerr for ax in axes for c in ax.containers)
    assert "95% interval over paired replicates" in heading(figs[-1])
    plain = ratio_axes(kernel_figures(monkeypatch, report.load_results(cpu_run), tmp_path / "plain"))
    assert not any(c.has_yerr for ax in plain for c in ax.containers)


def test_e2e_figures_say_the_model_device_and_batch_sizes(e2e_run, tmp_path, monkeypatch):
    from attnbench.results.read import E2E

    df = report.load_results(e2e_run / "results.csv")
    figs = drawn_figures(monkeypatch, lambda: export.plot_results([("", df)], tmp_path, E2E))
    assert len(figs) == 2
    for fig in figs:
        title = heading(fig)
        assert "CPU: pipeline demo" in title and "tiny" in title and "M params" in title and "bfloat16" in title
        assert len(fig.legends) == 1
        for ax in fig.axes:
            assert list(ax.get_xticks()) == [1, 2] and "batch size" in ax.get_xlabel()
    assert ratio_axes(figs) and all(ax.get_ylim()[0] <= 0.95 for ax in ratio_axes(figs))


def test_e2e_ratios_carry_the_interval_of_their_rows_p50s(e2e_run, tmp_path, monkeypatch):
    from attnbench.results.read import E2E

    df = report.load_results(e2e_run / "results.csv")
    df = df.assign(request_p50_ci_low_s=df["request_p50_s"] * 0.9, request_p50_ci_high_s=df["request_p50_s"] * 1.1)
    figs = drawn_figures(monkeypatch, lambda: export.plot_results([("", df)], tmp_path, E2E))
    assert all(c.has_yerr for ax in ratio_axes(figs) for c in ax.containers)
    (ax,) = ratio_axes(figs)
    low, high = ax.containers[0].lines[2][0].get_segments()[0][:, 1]  # the first bar's ends
    assert low == pytest.approx(0.9 / 1.1 * ax.containers[0].lines[0].get_ydata()[0])
    assert high == pytest.approx(1.1 / 0.9 * ax.containers[0].lines[0].get_ydata()[0])
    assert "95 % intervals of the p50" in heading(figs[-1])


def test_no_placeholder_text_in_any_figure_summary_export_or_console(cpu_run, e2e_run, tmp_path, monkeypatch, cli):
    from attnbench.results.read import E2E

    kernel = report.load_results(cpu_run)
    e2e = report.load_results(e2e_run / "results.csv")
    figs = [*kernel_figures(monkeypatch, with_replicates(kernel), tmp_path / "k"),
            *drawn_figures(monkeypatch, lambda: export.plot_results([("", e2e)], tmp_path / "e", E2E))]
    assert not [t for fig in figs for t in texts(fig) if "<" in t]
    written = [(cpu_run / "summary.md").read_text(), (e2e_run / "summary.md").read_text(),
               export.to_markdown(kernel), export.to_markdown(e2e, E2E)]
    assert all("<strategy>" not in text and "split / unified > 1 means unified is faster" in text for text in written)
    assert "0.00 B params" not in (e2e_run / "summary.md").read_text()
    from attnbench.console import make_console, print_seed_table

    console = make_console()
    with console.capture() as captured:
        print_seed_table(console, kernel)
    assert "<strategy>" not in captured.get() and "split / unified > 1 means unified is faster" in captured.get()


@pytest.mark.parametrize("params_b, shown", [(0.00170624, "1.71 M params"), (6.74, "6.74 B params"),
                                             (0.000012, "12 k params"), (0, "0 params")])
def test_params_are_written_in_a_unit_that_shows_them(params_b, shown):
    from attnbench.results.tables import format_params

    assert format_params(params_b) == shown


def test_a_single_run_is_redrawn_in_place_and_a_symlinked_picture_is_replaced_not_followed(cpu_run, tmp_path, cli):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(cpu_run, run)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (run / "latency_h4kv2_d32.png").unlink()
    (run / "latency_h4kv2_d32.png").symlink_to(victim)
    assert cli("plot", run).exit_code == 0
    assert victim.read_text() == "keep"
    assert not (run / "latency_h4kv2_d32.png").is_symlink()
    assert (run / "latency_h4kv2_d32.png").read_bytes().startswith(PNG_MAGIC)


def test_a_replay_run_is_drawn_alone_and_needs_its_buckets(tmp_path, cli):
    """Beside another run, or without its buckets.csv, a replay run is refused in one line, and
    nothing is written."""
    import shutil

    from results_fixtures import EXAMPLES

    replay = next(p for p in EXAMPLES if (p / "buckets.csv").exists())
    other = next(p for p in EXAMPLES if not (p / "buckets.csv").exists())
    both = cli("plot", replay, other, "--out", tmp_path / "both")
    assert both.exit_code == 1 and both.output.startswith("error: plot: ") and "alone" in both.output
    assert not (tmp_path / "both").exists() or not any((tmp_path / "both").iterdir())
    bare = tmp_path / "bare"
    shutil.copytree(replay, bare)
    (bare / "buckets.csv").unlink()
    lost = cli("plot", bare, "--out", tmp_path / "out")
    assert lost.exit_code == 1 and "without buckets.csv" in lost.output and len(lost.output.splitlines()) == 1
    (bare / "buckets.csv").write_text("step,kind\n0,decode\n")
    bad = cli("plot", bare, "--out", tmp_path / "out2")
    assert bad.exit_code == 1 and "is not a buckets.csv: it lacks" in bad.output
