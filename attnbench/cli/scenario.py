"""Scenario files: a named, reviewable sweep in TOML, run by `attnbench run scenarios/NAME.toml`.

The keys of a file are the flags of the command it names (`command = "kernel"` or `"e2e"`), read
from that command's own CLI definition: a flag added to the CLI is a key at once, with nothing to
add here. A key may be spelled with dashes or underscores. A list is accepted wherever the flag
takes a comma-separated list. Precedence: the command's defaults < the file < flags given to
`attnbench run` (--heads or --dim given there replace the file's `shapes`). The whole file is
checked before anything runs, by the same validators as the command line: a file that is not
UTF-8 TOML, an unknown key, a wrong type or a bad value is refused with the key's name.

Beside `command`, one key is the file's own: `cpu = true` (it runs on the CPU) or `cpu = "why
not"` (a GPU scenario: on a machine without a GPU, `attnbench run` and its `--check` refuse it
with that reason, unless --device cpu asks for the CPU anyway).

One thing a file can say that one `attnbench kernel` call cannot: `context = [1024, 4096]`. Each
value runs as its own sweep into OUT/context-VALUE/, and their rows are merged into OUT/results.csv,
so OUT reads as one run for compare, export and plot.

`--shard I/N` and `--devices` are kernel flags, so a scenario takes them as keys or overrides
(each context's sweep is split the same way). Under torchrun a kernel scenario is refused: its
ranks would share OUT; run it as `--shard I/N` jobs and `attnbench merge` them.
"""

from __future__ import annotations

import difflib
import types
import typing
import re
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from attnbench.cli.flags import COMMANDS, Flag, command_flags, e2e_args, kernel_args
from attnbench.e2e.args import length_pairs, validate_args
from attnbench.errors import UsageError, check_unique
from attnbench.runs.kernel import plan_kernel
from attnbench.workers import distributed

SWEPT = "context"  # the kernel key that may hold a list: one sweep per value
MAX_FILE_BYTES = 1 << 20  # a scenario is a page of TOML; anything larger is the wrong file
TYPE_NAMES = {"boolean": "true or false", "integer": "an integer", "float": "a number", "path": "a path string",
              "text": "a string, a number or a list of them"}


@dataclass
class Scenario:
    path: Path
    command: str
    values: dict           # parameter -> value for every flag of the command, defaults filled in
    contexts: list         # kernel: one sweep per entry ([None]: the device default)
    text: str
    given: dict            # key -> value set by the file or an override
    cpu: bool | str | None = None  # `cpu = true`: runs on the CPU; `cpu = "why not"`: a GPU scenario; None: not said

    @property
    def name(self) -> str:
        return self.path.stem


def _type_name(value) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a table"}.get(type(value), type(value).__name__)


def check_value(flag: Flag, value, command: str):
    """A TOML value of the right type for the flag, as the command's function takes it."""
    ok = {"boolean": isinstance(value, bool),
          "integer": isinstance(value, int) and not isinstance(value, bool),
          "float": isinstance(value, (int, float)) and not isinstance(value, bool),
          "path": isinstance(value, str)}.get(flag.type)
    if flag.type == "text":
        items = value if isinstance(value, list) else [value]
        ok = bool(items) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in items)
        if ok and isinstance(value, list) and command == "kernel" and flag.key == SWEPT:
            return [str(v) for v in value]
        value = ",".join(str(v) for v in items) if ok else value
    if not ok:
        raise UsageError(f"{flag.key}: expected {TYPE_NAMES.get(flag.type, flag.type)}, got {_type_name(value)} "
                         f"{value!r}")
    if flag.type == "path":
        return Path(value)
    return float(value) if flag.type == "float" else value


def parse_overrides(argv: list[str], flags: dict[str, Flag]) -> dict:
    """`--tokens 8,16 --no-causal --kv-heads=2` -> {"tokens": "8,16", "causal": False, "kv_heads": 2}."""
    negatives = {f.negative: f for f in flags.values() if f.negative}
    out, i = {}, 0
    while i < len(argv):
        token = argv[i]
        name, _, inline = token.partition("=")
        if name in negatives:
            out[negatives[name].key] = False
            i += 1
            continue
        flag = flags.get(name.lstrip("-").replace("-", "_")) if name.startswith("--") else None
        if flag is None:
            raise UsageError(f"{token}: not a flag of this scenario's command{_suggest(name.lstrip('-'), flags)}")
        if flag.type == "boolean":
            if inline:
                raise UsageError(f"{name}: an on/off flag takes no value (use {name} or {flag.negative or name})")
            out[flag.key], i = True, i + 1
            continue
        if not inline and i + 1 >= len(argv):
            raise UsageError(f"{name}: needs a value")
        raw, i = (inline, i + 1) if inline else (argv[i + 1], i + 2)
        try:
            out[flag.key] = {"integer": int, "float": float, "path": Path}.get(flag.type, str)(raw)
        except ValueError:
            raise UsageError(f"{name}: expected {TYPE_NAMES[flag.type]}, got {raw!r}") from None
    return out


def _suggest(key: str, flags: dict) -> str:
    close = difflib.get_close_matches(key.replace("-", "_"), list(flags), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def load_scenario(path: Path, overrides: list[str] | None = None) -> Scenario:
    """Read, type-check and value-check a scenario file with its overrides; run nothing."""
    text = read_text(path)
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise UsageError(f"not valid TOML: {exc}") from None
    command = data.pop("command", None)
    if not isinstance(command, str) or command not in COMMANDS:
        raise UsageError(f"command: expected one of {', '.join(map(repr, COMMANDS))}, got {command!r}")
    cpu = data.pop("cpu", None)
    if not (cpu is None or cpu is True or (isinstance(cpu, str) and cpu.strip())):
        raise UsageError(f"cpu: expected true (it runs on the CPU) or a string saying why it does not, got "
                         f"{_type_name(cpu)} {cpu!r}")
    flags = command_flags(command)
    given = {}
    for raw_key, value in data.items():
        key = raw_key.replace("-", "_")
        if key not in flags:
            raise UsageError(f"{raw_key}: unknown key for command = {command!r}{_suggest(key, flags)} "
                             f"(the keys are the flags of `attnbench {command} --help`)")
        given[key] = check_value(flags[key], value, command)
    overridden = parse_overrides(overrides or [], flags)
    if command == "kernel" and {"heads", "dim"} & set(overridden):
        given.pop("shapes", None)  # --heads/--dim replace the file's shapes, which would otherwise win
    for key, value in overridden.items():
        sweeps = command == "kernel" and key == SWEPT and "," in str(value)
        given[key] = str(value).split(",") if sweeps else value
    values = {f.param: f.default for f in flags.values()}
    values.update({flags[k].param: v for k, v in given.items()})
    contexts = [None]
    if command == "kernel" and distributed.launched():
        raise UsageError("torchrun: a kernel scenario does not run under torchrun; run its shards as jobs "
                         "(attnbench run FILE --shard I/N, then attnbench merge), or `attnbench kernel` under torchrun")
    if command == "kernel":
        contexts = values.pop("context") if isinstance(values["context"], list) else [values.pop("context")]
        check_unique([str(c).strip() for c in contexts], SWEPT)
        for context in contexts:
            check_kernel_values({**values, "context": context})
    else:
        args = e2e_args(values)
        validate_args(args)
        length_pairs(args)
    return Scenario(path, command, values, contexts, text, given, cpu)


def read_text(path: Path) -> str:
    """The file's text: a regular, non-empty UTF-8 file of reasonable size, or one line saying why not."""
    try:
        if path.exists() and not path.is_file():
            raise UsageError("is a directory, not a scenario file" if path.is_dir() else "not a regular file")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise UsageError(f"larger than {MAX_FILE_BYTES >> 20} MiB: not a scenario file")
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the scenario file ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"not UTF-8 text (byte {exc.start}); a scenario file is TOML") from None
    if not text.strip():
        raise UsageError("empty; a scenario needs at least command = \"kernel\" or \"e2e\"")
    return text


def check_kernel_values(values: dict) -> None:
    """Every value of one kernel sweep, checked by the function that plans the sweep itself."""
    plan_kernel(kernel_args(values), machine=False)
