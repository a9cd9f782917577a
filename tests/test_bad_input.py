"""Bad input, every command: one `error:` line on stderr naming the flag or file, exit 1, no traceback.

Why a file of its own: the convention (attnbench/cli/common.py, main.py) is one promise across
commands, flags, scenario files and checkpoint configs, so it is tested over all of them at once.
Tables list inputs a user could plausibly type; hypothesis adds values nobody thought of. Every
case is invalid, so each must fail fast, before a tensor is made or a directory written.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.e2e import runner as e2e_runner
from attnbench.e2e.checkpoint import args_from_hf_config
from attnbench.errors import AttnbenchError
from attnbench.kernels import plan as kernel_plan
from attnbench.kernels.workload import MAX_BLOCK_SIZE, MAX_HEAD_DIM, MAX_HEADS, MAX_SEED, MAX_SPEC_K, MAX_TOKENS

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
KERNEL = ["kernel", "--heads", "4", "--dim", "32", "--tokens", "8", "--context", "32", "--kind", "decode",
          "--budget-ms", "5", "--backend", "reference", "--device", "cpu"]
E2E = ["e2e", "--model", "tiny", "--input-len", "8", "--output-len", "4", "--batch-size", "1", "--warmup", "0",
       "--iters", "1", "--device", "cpu"]
SCENARIO = 'command = "kernel"\nheads = 4\ndim = 32\ntokens = [8]\ncontext = 32\nkind = "decode"\n'


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "80"})


def assert_one_error_line(result, named: str = "") -> str:
    """Exit 1, nothing on stdout, one `error:` line on stderr (naming `named`), no traceback."""
    crashed = result.exception if not isinstance(result.exception, SystemExit) else None
    assert crashed is None, f"{type(crashed).__name__}: {crashed}"
    assert "Traceback" not in result.output
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert named in lines[0], lines[0]
    assert not result.stdout.strip(), result.stdout
    return lines[0]


# -- kernel flags: flag, value (or values), and the name the one line must carry -------------------

KERNEL_BAD = [
    # Typer's own parse errors: same line, same exit code
    ("--kv-heads", "x"), ("--kv-heads", "1.5"), ("--block-size", "1e9"), ("--block-size", ""), ("--spec-k", "2.5"),
    ("--prefill-len", "x"), ("--decode-share", "half"), ("--budget-ms", "soon"), ("--rel-spread", "1%"),
    ("--seed", "1e3"), ("--seed", "abc"), ("--bogus", "1"), ("--tokenz", "8"), ("--causal=3",), ("--json=yes",),
    ("extra",),
    # sizes out of range, zero, negative, not numbers, listed twice
    ("--heads", "0"), ("--heads", "-1"), ("--heads", "1025"), ("--heads", "1000000"), ("--heads", "x"),
    ("--heads", ","), ("--heads", "4,4"), ("--dim", "0"), ("--dim", "12"), ("--dim", "2048"), ("--dim", "32,32"),
    ("--dim", "x"), ("--shapes", "4x32,4x32"), ("--shapes", "0x32"), ("--shapes", "4x"), ("--shapes", "4x32x2"),
    ("--kv-heads", "0"), ("--kv-heads", "-2"), ("--kv-heads", "3"), ("--kv-heads", "2048"), ("--kv-heads", "8"),
    ("--tokens", "0"), ("--tokens", "-5"), ("--tokens", "1000000000"), ("--tokens", "8,8"), ("--tokens", "x"),
    ("--tokens", "8.5"), ("--tokens", "99999999999999999999999"),
    ("--kind", "bogus"), ("--kind", "decode,decode"), ("--kind", "all,decode"), ("--kind", ","),
    ("--strategy", "fission"), ("--strategy", "unified,unified"), ("--strategy", ""), ("--backend", "bogus"),
    ("--backend", "reference,reference"), ("--mode", "graph"), ("--mode", "eager,eager"), ("--mode", "both,eager"),
    ("--mode", "fast"), ("--dtype", "fp8"), ("--dtype", ""), ("--dtype", "float32"),
    ("--block-size", "0"), ("--block-size", "24"), ("--block-size", "-16"), ("--block-size", "8192"),
    ("--block-size", "1000000000"), ("--context", "0"), ("--context", "-1"), ("--context", "uniform:5"),
    ("--context", "uniform:9:1"), ("--context", "uniform:1:99999999"), ("--context", "99999999"),
    ("--context", "abc"), ("--context", "1.5"), ("--context", "64,64"),
    ("--decode-share", "1"), ("--decode-share", "-0.1"), ("--decode-share", "nan"), ("--decode-share", "inf"),
    ("--prefix-ratio", "1"), ("--prefix-ratio", "-0.5"), ("--prefix-ratio", "nan"), ("--prefix-ratio", "0.5,0.5"),
    ("--prefix-ratio", "x"), ("--spec-k", "0"), ("--spec-k", "-1"), ("--spec-k", "2000"), ("--prefill-len", "0"),
    ("--prefill-len", "2000000"), ("--budget-ms", "0"), ("--budget-ms", "-1"), ("--budget-ms", "nan"),
    ("--budget-ms", "inf"), ("--budget-ms", "-inf"), ("--budget-ms", "1e12"), ("--rel-spread", "-0.1"),
    ("--rel-spread", "nan"), ("--rel-spread", "inf"), ("--rel-spread", "2"), ("--seed", "-1"),
    ("--seed", str(2**63)), ("--seed", str(2**64)), ("--seed", str(10**30)), ("--device", "tpu"),
    ("--device", ""),
    # the largest point cannot fit in this machine's memory (and would never finish on a CPU)
    ("--tokens", "1000000", "--kind", "prefill", "--heads", "1024", "--dim", "1024"),
    ("--tokens", "100000", "--context", "4000000"),
]


def named_flag(case: tuple) -> str:
    """The flag the line must name: the case's first, or the one a --shapes pair feeds."""
    return "--heads" if case == ("--shapes", "0x32") else case[0].split("=")[0]


@pytest.mark.parametrize("case", KERNEL_BAD, ids=map(" ".join, KERNEL_BAD))
def test_a_bad_kernel_flag_is_one_line(case, tmp_path):
    out = tmp_path / "out"
    assert_one_error_line(invoke(*KERNEL, *case, "--out", out), named_flag(case))
    assert not out.exists()  # refused before the run directory was made


def test_the_memory_check_names_what_to_shrink(tmp_path):
    line = assert_one_error_line(invoke(*KERNEL, "--tokens", "100000", "--context", "4000000"))
    assert "--tokens/--context" in line and "GiB on the CPU" in line and "available" in line


def test_an_e2e_run_must_fit_in_the_memory_available(monkeypatch, tmp_path):
    monkeypatch.setattr(e2e_runner, "available_host_bytes", lambda: 2**20)
    line = assert_one_error_line(invoke(*E2E, "--out", tmp_path / "out"), "--model tiny")
    assert "0.0 GiB available on this machine" in line and not (tmp_path / "out").exists()


def test_check_refuses_a_scenario_that_cannot_fit_here(monkeypatch):
    monkeypatch.setattr(kernel_plan, "available_host_bytes", lambda: 2**30)
    line = assert_one_error_line(invoke("run", "scenarios/decode-gqa.toml", "--check", "--device", "cpu",
                                        "--mode", "eager"))
    assert "decode-gqa.toml" in line and "1.0 GiB available" in line


INT_RANGES = {"--kv-heads": (1, MAX_HEADS), "--block-size": (16, MAX_BLOCK_SIZE), "--spec-k": (1, MAX_SPEC_K),
              "--prefill-len": (1, MAX_TOKENS), "--seed": (0, MAX_SEED), "--heads": (1, MAX_HEADS),
              "--dim": (8, MAX_HEAD_DIM), "--tokens": (1, MAX_TOKENS)}


@st.composite
def out_of_range(draw, ranges: dict):
    flag = draw(st.sampled_from(sorted(ranges)))
    low, high = ranges[flag]
    return flag, draw(st.one_of(st.integers(max_value=low - 1), st.integers(min_value=high + 1)))


@SETTINGS
@given(out_of_range(INT_RANGES))
def test_any_out_of_range_integer_is_one_line(case):
    flag, value = case
    assert_one_error_line(invoke(*KERNEL, flag, str(value)), flag)


@SETTINGS
@given(st.sampled_from(sorted(INT_RANGES)), st.text(alphabet="abcxyz!#%.:;/ e+,", min_size=1, max_size=8))
def test_any_non_integer_for_an_integer_flag_is_one_line(flag, text):
    assert_one_error_line(invoke(*KERNEL, flag, text))  # no digits in the alphabet: never a number


@SETTINGS
@given(st.sampled_from(["--budget-ms", "--rel-spread", "--decode-share", "--prefix-ratio"]),
       st.one_of(st.sampled_from([float("nan"), float("inf"), -float("inf")]),
                 st.floats(max_value=-1e-9, allow_nan=False), st.floats(min_value=3.6e6 + 1, allow_infinity=False)))
def test_any_non_finite_or_out_of_range_number_is_one_line(flag, value):
    assert_one_error_line(invoke(*KERNEL, flag, repr(value)), flag)


@SETTINGS
@given(st.sampled_from(["--tokens", "--heads", "--kind", "--strategy", "--backend", "--mode", "--prefix-ratio"]),
       st.data())
def test_a_value_listed_twice_is_refused_naming_it(flag, data):
    pool = {"--tokens": ["1", "2", "8", "16"], "--heads": ["4", "8", "16"], "--kind": ["decode", "prefill", "mixed"],
            "--strategy": ["unified", "split"], "--backend": ["reference"], "--mode": ["eager"],
            "--prefix-ratio": ["0", "0.25", "0.5"]}[flag]
    values = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True))
    twice = data.draw(st.sampled_from(values))
    listed = values + [twice]
    line = assert_one_error_line(invoke(*KERNEL, flag, ",".join(data.draw(st.permutations(listed)))), flag)
    assert "listed twice" in line


# -- e2e flags ------------------------------------------------------------------------------------

E2E_BAD = [
    ("--input-len", "0"), ("--input-len", "-1"), ("--input-len", "x"), ("--input-len", "2000000"),
    ("--input-len", ""), ("--input-len", "5000"), ("--input-len", "8,8", "--output-len", "4,4"),
    ("--input-len", "1,2,3", "--output-len", "4,5"), ("--output-len", "0"), ("--output-len", "-3"),
    ("--batch-size", "0"), ("--batch-size", "1,1"), ("--batch-size", "5000"), ("--batch-size", "two"),
    ("--batch-size", "1.5"), ("--chunk-size", "0"), ("--chunk-size", "-1"), ("--chunk-size", "x"),
    ("--chunk-size", "2000000"), ("--warmup", "-1"), ("--warmup", "20000"), ("--warmup", "x"), ("--iters", "0"),
    ("--iters", "20000"), ("--iters", "x"), ("--seed", "-1"), ("--seed", str(2**63)), ("--seed", str(10**30)),
    ("--block-size", "0"), ("--block-size", "24"), ("--block-size", "8192"), ("--dtype", "fp8"),
    ("--strategy", "fission"), ("--strategy", "unified,unified"), ("--backend", "bogus"),
    ("--backend", "reference,reference"), ("--device", "tpu"), ("--model", "gpt-5"), ("--model", ""),
    ("--model", "./no/such/dir"), ("--model", "llama-7b"), ("--model", "a\x00b"), ("--eager=yes",), ("--bogus",),
]


@pytest.mark.parametrize("case", E2E_BAD, ids=map(repr, E2E_BAD))
def test_a_bad_e2e_flag_is_one_line(case, tmp_path):
    out = tmp_path / "out"
    assert_one_error_line(invoke(*E2E, *case, "--out", out), case[0].split("=")[0])
    assert not out.exists()


# -- scenario files ---------------------------------------------------------------------------------

def scenario_result(body: bytes | str, *overrides: str):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.toml"
        path.write_bytes(body if isinstance(body, bytes) else body.encode())
        return invoke("run", path, "--check", *overrides), path.name


SCENARIO_BAD = [
    b"", b"   \n", b"\xff\xfe\x00c\x00o", "command = 'kernel'\nheads = '\u00e9'\n".encode("latin-1"),
    "command = ['kernel']\n", "command = 3\n", "command = 'bench'\n", "heads = 4\n",
    SCENARIO + "tokens = [8, 8]\n", SCENARIO.replace("context = 32", "context = [64, 64]"),
    SCENARIO + "seed = 99999999999999999999\n", SCENARIO + "budget_ms = nan\n", SCENARIO + "rel_spread = -inf\n",
    SCENARIO + "decode_share = inf\n", SCENARIO + "heads = [4, 4]\n", SCENARIO + "block_size = 1.5\n",
    SCENARIO + "causal = 'yes'\n", SCENARIO + "tokens = []\n", SCENARIO + "tokens = [[8]]\n",
    SCENARIO + "out = 3\n", SCENARIO + "[kind]\nx = 1\n", SCENARIO + "a.b = 1\n", "x = [" * 2000,
    'command = "e2e"\nmodel = "tiny"\nbatch_size = [1, 1]\n', 'command = "e2e"\nwarmup = -1\n',
    'command = "e2e"\ninput_len = [8, 8]\noutput_len = [4, 4]\n', 'command = "e2e"\nseed = -5\n',
    'command = "e2e"\niters = 1.5\n', 'command = "e2e"\nstrategy = ["split", "split"]\n',
]


@pytest.mark.parametrize("body", SCENARIO_BAD, ids=range(len(SCENARIO_BAD)))
def test_a_bad_scenario_file_is_one_line_naming_the_file(body):
    result, name = scenario_result(body)
    assert_one_error_line(result, name)


@pytest.mark.parametrize("overrides", [["--causal=false"], ["--tokens"], ["--tokenz", "3"], ["--budget-ms", "soon"],
                                       ["--budget-ms", "nan"], ["--tokens", "8,8"], ["--seed", str(2**70)],
                                       ["--context", "64,64"]], ids=repr)
def test_a_bad_override_of_a_scenario_is_one_line(overrides):
    result, name = scenario_result(SCENARIO, *overrides)
    assert overrides[0].split("=")[0].lstrip("-") in assert_one_error_line(result, name)


def test_a_directory_or_a_missing_file_is_named(tmp_path):
    assert "is a directory" in assert_one_error_line(invoke("run", tmp_path, "--check"), str(tmp_path))
    assert_one_error_line(invoke("run", tmp_path / "none.toml"), "none.toml")


@SETTINGS
@given(st.binary(min_size=1, max_size=64))
def test_any_bytes_that_are_not_a_scenario_are_one_line(body):
    if b"command" in body:
        return  # random bytes spelling a valid scenario are not worth the check
    result, name = scenario_result(body)
    assert_one_error_line(result, name)


TOML_VALUES = st.one_of(st.booleans().map(str).map(str.lower), st.text(max_size=5).map(json.dumps),
                        st.floats(allow_nan=False, allow_infinity=False).map(repr), st.just("[]"), st.just("{a = 1}"))


@SETTINGS
@given(st.sampled_from(["kv_heads", "block_size", "seed", "spec_k", "prefill_len", "causal", "cold_l2", "profile"]),
       TOML_VALUES)
def test_a_value_of_the_wrong_type_names_its_key(key, value):
    if key in ("causal", "cold_l2", "profile") and value in ("true", "false"):
        return  # the right type: not this property's business
    result, name = scenario_result(SCENARIO + f"{key} = {value}\n")
    line = assert_one_error_line(result, name)
    assert key in line or "not valid TOML" in line, line


# -- checkpoint config.json -------------------------------------------------------------------------

GOOD_CONFIG = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1024, "rms_norm_eps": 1e-5,
               "rope_theta": 10000.0, "max_position_embeddings": 4096, "tie_word_embeddings": False}


def checkpoint_result(config: dict | str | bytes):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ckpt"
        path.mkdir()
        raw = config if isinstance(config, (str, bytes)) else json.dumps(config)
        (path / "config.json").write_bytes(raw if isinstance(raw, bytes) else raw.encode())
        (path / "model.safetensors").write_bytes(b"never read: the config is refused first")
        return invoke(*E2E, "--model", path)


def test_the_good_config_is_read():
    assert args_from_hf_config(GOOD_CONFIG, "good").head_dim == 64


CONFIG_BAD = (
    [({**GOOD_CONFIG, key: value}, key) for key in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                                                    "intermediate_size", "vocab_size")
     for value in ("32", None, -1, 0, 32.5, True, [32], 10**30)]
    + [({k: v for k, v in GOOD_CONFIG.items() if k != key}, key) for key in ("hidden_size", "vocab_size")]
    + [({**GOOD_CONFIG, "model_type": value}, "model_type") for value in (None, "gpt2", 3)]
    + [({**GOOD_CONFIG, key: value}, key) for key, value in [
        ("num_key_value_heads", 3), ("num_key_value_heads", 0), ("num_key_value_heads", "2"), ("hidden_size", 250),
        ("head_dim", 12), ("head_dim", "x"), ("rope_theta", "x"), ("rope_theta", -1), ("rope_theta", 0),
        ("rms_norm_eps", 0), ("rms_norm_eps", 2), ("tie_word_embeddings", "false"), ("tie_word_embeddings", 1),
        ("attention_bias", "false"), ("attention_bias", True), ("max_position_embeddings", 0),
        ("rope_scaling", "linear"), ("rope_scaling", [1]), ("rope_scaling", {"rope_type": "yarn", "factor": 2}),
        ("rope_scaling", {"rope_type": "linear"}), ("rope_scaling", {"type": "linear", "factor": -1}),
        ("rope_scaling", {"rope_type": "llama3", "factor": 8.0}), ("rope_scaling", {"type": 3}),
        ("rope_scaling", {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 1,
                          "original_max_position_embeddings": 8192}),
        ("rope_parameters", {"rope_type": "default", "rope_theta": "big"})]]
    + [(json.dumps(GOOD_CONFIG).replace("10000.0", "NaN"), "rope_theta"),
       (json.dumps(GOOD_CONFIG).replace("10000.0", "Infinity"), "rope_theta"),
       ('{"vocab_size": 1, "vocab_size": 2}', "appears twice"), ("{", "not valid JSON"), ("[]", "JSON object"),
       ("null", "JSON object"), ("[" * 100000, "not valid JSON"), (b"\xff\xfe{}", "not UTF-8")]
)


@pytest.mark.parametrize("config, named", CONFIG_BAD, ids=range(len(CONFIG_BAD)))
def test_a_bad_checkpoint_config_is_one_line_naming_the_key(config, named):
    line = assert_one_error_line(checkpoint_result(config), named)
    assert "config.json" in line or "checkpoint" in line


@SETTINGS
@given(st.sampled_from(["num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                        "intermediate_size", "vocab_size", "head_dim", "max_position_embeddings"]),
       st.one_of(st.text(max_size=4), st.booleans(), st.floats(), st.lists(st.integers(), max_size=2),
                 st.integers(max_value=0), st.integers(min_value=2**24 + 1)))
def test_any_config_value_of_the_wrong_type_or_range_names_its_key(key, value):
    assert_one_error_line(checkpoint_result({**GOOD_CONFIG, key: value}), key)


# -- the convention itself ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--help"], ["kernel", "--help"], ["e2e", "--help"], ["run", "--help"], []],
                         ids=repr)
def test_help_still_exits_0(argv):
    result = invoke(*argv)
    assert result.exit_code == 0 and "Usage" in result.output and not result.stderr.strip()


@pytest.mark.parametrize("argv", [["kernal"], ["run"], ["compare", "a"], ["export", "--format"], ["plot", "--bogus"],
                                  ["backends", "extra"], ["--bogus"]], ids=repr)
def test_parse_errors_of_every_command_are_one_line(argv):
    assert_one_error_line(invoke(*argv))


def test_a_run_that_measured_nothing_is_an_error():
    kernel_plan.check_measured({"pass": 1, "skipped": 3}, Path("out"))
    kernel_plan.check_measured({"fail": 2}, Path("out"))
    for verdicts in ({"skipped": 3, "error": 1}, {"error": 2}, {}):
        with pytest.raises(AttnbenchError, match="nothing was measured"):
            kernel_plan.check_measured(verdicts, Path("out"))


def test_the_tables_hold_at_least_100_distinct_invalid_inputs():
    cases = {("kernel", c) for c in KERNEL_BAD} | {("e2e", c) for c in E2E_BAD} | {("scenario", c) for c in SCENARIO_BAD}
    cases |= {("config", json.dumps(c, sort_keys=True) if isinstance(c, dict) else c) for c, _ in CONFIG_BAD}
    assert len(cases) >= 100, len(cases)
