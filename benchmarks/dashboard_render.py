"""How long the dashboard takes to draw in headless Chromium, and a screenshot of it for the docs.

Builds the tests' synthetic history (tests/history_fixtures.py: 50 H200 runs with a 5 % step
planted at commit 30 in the vllm-fa2 rows, 6 flat H100 runs), writes its site with
`attnbench dashboard` (with --plotly-js FILE: that partial plotly.js bundle inlined instead of the
full one), opens it from file:// REPEAT times in Debian's Chromium through Playwright, a new tab
each time in a 1400x1000 viewport, and prints per load, then the median over the loads:

- ready: ms from navigation until the charts in the viewport are drawn and the frame after them
  has run (the page sets window.dashboardReady then; charts below are drawn when scrolled to);
- parsed: ms until the HTML is parsed and its scripts have run (domInteractive: most of it is
  compiling and starting the inlined plotly.js);
- first paint: ms until Chromium first painted the page;
- the charts drawn at load and in all, the page's elements, and its size;
- with --trace, from a Chromium trace of each load (which slows it): the main thread's CPU time
  parsing the HTML with its inline scripts, and drawing the charts (the draw callbacks over 20 ms).
  These move far less with the machine's load than the wall times above.

Nothing is asserted (tests/test_dashboard_browser.py checks what the page shows).

    python3 benchmarks/dashboard_render.py --repeat 7
    python3 benchmarks/dashboard_render.py --repeat 7 --plotly-js package/plotly-basic.min.js
    python3 benchmarks/dashboard_render.py --repeat 3 --trace
    python3 benchmarks/dashboard_render.py --screenshot docs/images/dashboard.png

The screenshot is of another history, one of every kind of run (docs_site below: 8 synthetic
H200 kernel runs with the step planted at the sixth, the H200 replay example, and a tiny atlas and
e2e run made here on the CPU, about 20 s), at 1280 px wide, reduced to a 128-colour palette as
docs/images/regenerate.py does.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from history_fixtures import DRAW_ALL, EXAMPLE, make_history, make_runs  # noqa: E402

TINY_ATLAS = ["atlas", "--decode-share", "0:1:3", "--decode-context", "16", "--chunk", "8", "--head-dim", "32",
              "--gqa-group", "4", "--heads", "8", "--tokens", "4:16:2", "--budget-ms", "2", "--device", "cpu"]
COMMITS = {"atlas": "a71a5c0de", "e2e": "e2ec0de00"}  # the CPU runs' commits (made here, from no checkout)
TINY_E2E = ["e2e", "--model", "tiny", "--device", "cpu", "--warmup", "1", "--iters", "2", "--input-len", "8",
            "--output-len", "2", "--batch-size", "1,2"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="page loads to time")
    parser.add_argument("--plotly-js", type=Path, help="a partial plotly.js bundle to inline (attnbench dashboard "
                                                       "--plotly-js)")
    parser.add_argument("--trace", action="store_true", help="also the main thread's CPU time, from a trace")
    parser.add_argument("--screenshot", type=Path, help="write a PNG of the page here")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium", help="the browser to drive")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="attnbench-dashboard-") as tmp:
        history = make_history(Path(tmp))[0]
        site = Path(tmp) / "site"
        bundle = ["--plotly-js", str(args.plotly_js)] if args.plotly_js else []
        subprocess.run([sys.executable, "-m", "attnbench", "dashboard", str(history), "--out", str(site), *bundle],
                       check=True)
        with sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
            loads = [load(browser, site, args.trace) for _ in range(args.repeat)]
            report(loads, site, args.plotly_js)
            if args.screenshot:
                screenshot(browser, docs_site(Path(tmp) / "docs"), args.screenshot)
            browser.close()


TIMING = """() => ({ready: window.dashboardReady, parsed: performance.getEntriesByType('navigation')[0].domInteractive,
    paint: (performance.getEntriesByName('first-paint')[0] || {startTime: NaN}).startTime,
    drawn: document.querySelectorAll('.chart[data-stale="0"]').length, charts: document.querySelectorAll('.chart').length,
    elements: document.getElementsByTagName('*').length})"""


def load(browser, site: Path, trace: bool) -> dict:
    """One load in a new tab: its timings (ms since navigation) and what it drew; with `trace`, the
    main thread's CPU ms in HTML parsing (inline scripts included) and in drawing charts."""
    tab = browser.new_page(viewport={"width": 1400, "height": 1000})
    if trace:
        browser.start_tracing(page=tab, categories=["devtools.timeline"])
    tab.goto((site / "index.html").as_uri())
    tab.wait_for_function("window.dashboardReady !== undefined", timeout=60_000)
    timing = tab.evaluate(TIMING)
    if trace:
        events = [e for e in json.loads(browser.stop_tracing())["traceEvents"] if e.get("ph") == "X"]
        timing["parse_cpu"] = sum(e.get("tdur", 0) for e in events if e["name"] == "ParseHTML") / 1000
        timing["draw_cpu"] = sum(e.get("tdur", 0) for e in events if e["name"] == "FunctionCall" and
                                 e.get("tdur", 0) > 20_000) / 1000
    tab.close()
    return timing


def report(loads: list[dict], site: Path, plotly_js: Path | None) -> None:
    cpu = "; main-thread CPU: parse {parse_cpu:.0f} ms, draw {draw_cpu:.0f} ms" if "parse_cpu" in loads[0] else ""
    for timing in loads:
        print(f"ready {timing['ready']:.0f} ms; parsed {timing['parsed']:.0f} ms; first paint {timing['paint']:.0f} ms; "
              f"{timing['drawn']} of {timing['charts']} charts drawn at load; {timing['elements']} elements"
              + cpu.format(**timing))
    medians = {name: statistics.median(t[name] for t in loads)
               for name in ("ready", "parsed", "paint", "parse_cpu", "draw_cpu") if name in loads[0]}
    print(f"median of {len(loads)} loads: charts in view drawn and painted {medians['ready']:.0f} ms after navigation "
          f"(parsed {medians['parsed']:.0f} ms, first paint {medians['paint']:.0f} ms{cpu.format(**medians)}); "
          f"plotly.js: {plotly_js.name if plotly_js else 'the full bundle'}; "
          f"{(site / 'index.html').stat().st_size / 2**20:.1f} MiB page")


def attnbench(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "attnbench", *args], check=True, stdout=subprocess.DEVNULL)


def docs_site(root: Path) -> Path:
    """The site of a history of every kind of run: kernel, replay, atlas and e2e."""
    runs = [path for path, _, gpu in make_runs(root / "runs", runs=8, step_at=5) if gpu == "NVIDIA H200"]
    for path in runs:
        attnbench("history", "add", str(path), "--history", str(root / "history"))
    attnbench("history", "add", str(EXAMPLE.parent / "h200-replay-chat-high"), "--history", str(root / "history"))
    for name, command in (("atlas", TINY_ATLAS), ("e2e", TINY_E2E)):
        attnbench(*command, "--out", str(root / name))
        attnbench("history", "add", str(root / name), "--history", str(root / "history"), "--commit", COMMITS[name])
    attnbench("dashboard", str(root / "history"), "--out", str(root / "site"))
    return root / "site"


def screenshot(browser, site: Path, path: Path) -> None:
    from PIL import Image

    tab = browser.new_page(viewport={"width": 1280, "height": 1000})
    tab.goto((site / "index.html").as_uri())
    tab.wait_for_function("window.dashboardReady !== undefined", timeout=60_000)
    tab.evaluate(DRAW_ALL)
    tab.screenshot(path=str(path), full_page=True)
    Image.open(path).convert("RGB").quantize(colors=128).save(path, optimize=True)
    print(f"{path}: {path.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
