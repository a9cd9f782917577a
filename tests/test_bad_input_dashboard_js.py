"""`attnbench dashboard --plotly-js`: the file it inlines instead of the full plotly.js bundle.

A bad file (missing, a directory, not plotly.js, another plotly.js version, not UTF-8, one that
would end its <script> early) is one error line, exit 1, no traceback, and nothing written or
changed; a dist file of the installed version is inlined and named on the page.
"""

from __future__ import annotations

import pytest

from bad_input_cli import assert_one_error_line, invoke
from test_bad_input_history import state, world  # noqa: F401  (world is a fixture)

plotly_offline = pytest.importorskip("plotly.offline", reason="the dashboard extra (plotly) is not installed")
pytest.importorskip("ruptures", reason="the dashboard extra (ruptures) is not installed")

VERSION = plotly_offline.get_plotlyjs_version()


def header(version: str) -> str:
    return f"/**\n* plotly.js (basic - minified) v{version}\n* Licensed under the MIT license\n*/\n"


BUNDLES = {
    # name: what to put at the path (None: nothing), what the error names
    "missing": (None, "cannot read"),
    "a directory": ("dir", "cannot read"),
    "empty": ("", "header"),
    "not plotly.js": ("window.Plotly = {};\n" * 50, "header"),
    "another version": (header("0.1.0") + "window.Plotly = {};", "v0.1.0"),
    "not utf-8": (b"/**\n* plotly.js v" + VERSION.encode() + b"\n*/\n\xff\xfe\xfa", "cannot read"),
    "ends the script early": (header(VERSION) + 'var s = "</script><script>alert(1)";', "</script"),
}


@pytest.mark.parametrize("name", list(BUNDLES))
def test_a_bad_bundle_is_one_error_line_and_changes_nothing(world, name):  # noqa: F811
    tmp_path, _ = world
    content, named = BUNDLES[name]
    bundle = tmp_path / "plotly.js"
    if content == "dir":
        bundle.mkdir()
    elif isinstance(content, bytes):
        bundle.write_bytes(content)
    elif content is not None:
        bundle.write_text(content)
    before = state(tmp_path)
    result = invoke("dashboard", tmp_path / "history", "--out", tmp_path / "site", "--plotly-js", bundle)
    assert_one_error_line(result, named)
    assert state(tmp_path) == before


def test_a_bundle_of_the_installed_version_is_inlined_and_named(world):  # noqa: F811
    tmp_path, _ = world
    bundle = tmp_path / "plotly-basic.min.js"
    bundle.write_text(header(VERSION) + "window.partialBundle = 1;\n")
    assert invoke("dashboard", tmp_path / "history", "--out", tmp_path / "site", "--plotly-js", bundle).exit_code == 0
    page = (tmp_path / "site" / "index.html").read_text()
    assert "window.partialBundle = 1;" in page and f"plotly.js v{VERSION} (basic - minified bundle)" in page
    assert plotly_offline.get_plotlyjs()[:2000] not in page
    assert bundle.read_text() == header(VERSION) + "window.partialBundle = 1;\n"
