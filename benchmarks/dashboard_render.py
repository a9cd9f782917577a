"""How long the dashboard takes to draw in headless Chromium, and a screenshot of it for the docs.

Builds the tests' synthetic history (tests/history_fixtures.py: 50 H200 runs with a 5 % step
planted at commit 30 in the vllm-fa2 rows, 6 flat H100 runs), writes its site with
`attnbench dashboard`, opens it from file:// REPEAT times in Debian's Chromium through Playwright
and prints, per load: ms from navigation until every chart is drawn, and the page script's own
share. Nothing is asserted (tests/test_dashboard_browser.py checks what the page shows).

    python3 benchmarks/dashboard_render.py --repeat 5
    python3 benchmarks/dashboard_render.py --screenshot docs/images/dashboard.png

The screenshot shows the H200 (the GPU filter set), reduced to a 128-colour palette as
docs/images/regenerate.py does.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from history_fixtures import DRAW_ALL, make_history  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="page loads to time")
    parser.add_argument("--screenshot", type=Path, help="write a PNG of the page here")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium", help="the browser to drive")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="attnbench-dashboard-") as tmp:
        history = make_history(Path(tmp))[0]
        site = Path(tmp) / "site"
        subprocess.run([sys.executable, "-m", "attnbench", "dashboard", str(history), "--out", str(site)], check=True)
        with sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
            for _ in range(args.repeat):
                tab = browser.new_page(viewport={"width": 1400, "height": 1000})
                tab.goto((site / "index.html").as_uri())
                tab.wait_for_function("window.dashboardReady !== undefined", timeout=60_000)
                print(f"charts in view drawn {tab.evaluate('window.dashboardReady'):.0f} ms after navigation; "
                      f"page script {tab.evaluate('window.dashboardRenderMs'):.0f} ms; "
                      f"{(site / 'index.html').stat().st_size / 2**20:.1f} MiB page")
                tab.close()
            if args.screenshot:
                screenshot(browser, site, args.screenshot)
            browser.close()


def screenshot(browser, site: Path, path: Path) -> None:
    from PIL import Image

    tab = browser.new_page(viewport={"width": 1400, "height": 1000})
    tab.goto((site / "index.html").as_uri())
    tab.wait_for_function("window.dashboardReady !== undefined", timeout=60_000)
    tab.select_option("#filter-gpu", "NVIDIA H200")
    tab.evaluate(DRAW_ALL)
    tab.screenshot(path=str(path), full_page=True)
    Image.open(path).convert("RGB").quantize(colors=128).save(path, optimize=True)
    print(f"{path}: {path.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
