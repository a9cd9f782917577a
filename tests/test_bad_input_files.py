"""Bad scenario files and checkpoint configs: one `error:` line naming the file and the key, exit 1,
no traceback, before a tensor is made or a directory written.

Tables list files a user could plausibly write; hypothesis adds bytes and values nobody thought
of. The flag tables of test_bad_input.py and the tables here hold at least 100 distinct invalid
inputs between them (the last test counts them).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from bad_input_cli import E2E, SCENARIO, SETTINGS, assert_one_error_line, invoke
from hypothesis import given
from hypothesis import strategies as st
from test_bad_input import E2E_BAD, KERNEL_BAD

from attnbench.e2e.checkpoint import args_from_hf_config


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


def test_the_tables_hold_at_least_100_distinct_invalid_inputs():
    cases = {("kernel", c) for c in KERNEL_BAD} | {("e2e", c) for c in E2E_BAD} | {("scenario", c) for c in SCENARIO_BAD}
    cases |= {("config", json.dumps(c, sort_keys=True) if isinstance(c, dict) else c) for c, _ in CONFIG_BAD}
    assert len(cases) >= 100, len(cases)
