"""Crafted text in the rows a rule is fitted on stays text: rule.py holds it as data, never as code.

Why: rule.py is what a serving engine imports, and it used to be a template filled with the rows'
GPU name, library versions and mode, so a results.csv whose `gpu` closed the docstring ran code on
import. Each payload goes into every string column of results.csv and env.json that reaches
rule.json or rule.py (the GPU, every library version, the replayed trace's name); the fit succeeds,
rule.py is imported in a fresh `python -I` in the run's folder, nothing is created, the module holds
the payload as its value and chooses as rule.json's tree does. Where the column must name something
attnbench knows (the mode, a backend, a strategy, the trace's digest) the payload is refused in one
line; a NUL byte in results.csv is refused by its reader.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from attnbench.results.rule_cells import read_cells
from attnbench.results.rule_fit import predict
from bad_input_cli import invoke
from rule_fixtures import PREFILLS, cell_lengths, write_run

pytest.importorskip("sklearn", reason="rule fit needs scikit-learn (the `rule` extra)")

PAYLOADS = {
    "closes the docstring": 'x"""\nimport os; open("PWNED", "w").close()\n"""',
    "closes a call": '"); import os; open("PWNED","w") #',
    "single quotes": "'''; open('PWNED', 'w'); '''",
    "a newline": 'a\nimport os; open("PWNED","w")\n',
    "line separators": "a\u2028open('PWNED', 'w')\u2029b",
    "escapes": "\\x$\\N{x} \\",
    "markup": "[/x] [bold]</script>",
}
IMPORT = """import json, runpy, sys
module = runpy.run_path(sys.argv[1])
cells = json.loads(sys.argv[2])
print(json.dumps({"gpu": module["GPU"], "versions": module["LIBRARY_VERSIONS"],
                  "chosen": [" ".join(module["choose"](c["decode_kv_lens"], c["prefill_query_lens"], c["prefill_kv_lens"],
                                                       32, 8, 128)) for c in cells]}))
"""


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_a_payload_in_every_string_column_stays_data(tmp_path, payload):
    run = write_run(tmp_path / "run", gpu=payload, library_version=payload, context_columns=True)
    (run / "env.json").write_text(json.dumps({"replay": {"trace": payload}}))
    fitted = invoke("rule", "fit", run, "--out", tmp_path / "rule", "--max-depth", "2", "--folds", "2")
    assert fitted.exit_code == 0, fitted.output
    record = json.loads((tmp_path / "rule" / "rule.json").read_text())
    assert record["gpu"] == [payload] and set(record["library_versions"].values()) == {payload}
    assert record["runs"][0]["trace"] == payload
    features = read_cells([run], None).features
    buckets = [int(cell.split(":")[1].split("|")[0]) for cell in features.index]
    cells = [cell_lengths(b, PREFILLS[b]) for b in buckets]
    done = subprocess.run([sys.executable, "-I", "-c", IMPORT, str(tmp_path / "rule" / "rule.py"), json.dumps(cells)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not list(tmp_path.rglob("PWNED")) and not list(tmp_path.parent.glob("PWNED"))
    answer = json.loads(done.stdout)
    assert answer["gpu"] == [payload] and set(answer["versions"].values()) == {payload}
    assert answer["chosen"] == list(predict(record["tree"], features))


def renamed(run, column: str, value: str, backend: str = "flashinfer"):
    """`run` with `column` of one backend's rows set to `value` (every row's would make them duplicates)."""
    rows = pd.read_csv(run / "results.csv", dtype=str, keep_default_na=False)
    rows.loc[rows["backend"] == backend, column] = value
    rows.to_csv(run / "results.csv", index=False)
    return run


@pytest.mark.parametrize("where", ["mode", "backend", "strategy", "replay.sha256", "gpu NUL"])
@pytest.mark.parametrize("payload", list(PAYLOADS.values())[:3], ids=list(PAYLOADS)[:3])
def test_a_payload_where_a_known_name_belongs_is_refused(tmp_path, where, payload):
    run = write_run(tmp_path / "run", context_columns=True, **({"mode": payload} if where == "mode" else {}))
    if where == "replay.sha256":
        (run / "env.json").write_text(json.dumps({"replay": {"trace": "synthetic", "sha256": payload}}))
    elif where == "gpu NUL":
        renamed(run, "gpu", payload + "\x00")
    elif where != "mode":  # the mode is every row's (above): one mode, the payload
        renamed(run, where, payload)
    result = invoke("rule", "fit", run, "--out", tmp_path / "rule")
    assert result.exit_code == 1 and result.output.startswith("error: RUN: "), result.output
    assert "Traceback" not in result.output and not (tmp_path / "rule").exists()
    if where != "gpu NUL":
        assert where.split(".")[-1] in result.output
