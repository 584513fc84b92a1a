"""The documentation is part of the interface.

docs/REFERENCE.md is the reference: a missing command, option, config field or exit code fails
the build, and its generated tables must be current. README.md is the quick start: short, with
the commands a new user types first and no timing that `make bench` does not measure. In both,
every `mlb` command line is accepted by the CLI's parser, every link, anchor and named file
exists, and every Python and YAML example is valid.
"""

import importlib.util
import re
import shlex
from pathlib import Path

import pytest
import typer.main

from mlbaseline.cli import app
from mlbaseline.config import iter_fields, resolve
from mlbaseline.errors import EXIT_CODE_TABLE

ROOT = Path(__file__).resolve().parent.parent
README_PATH = ROOT / "README.md"
REFERENCE_PATH = ROOT / "docs" / "REFERENCE.md"
README = README_PATH.read_text(encoding="utf-8")
REFERENCE = REFERENCE_PATH.read_text(encoding="utf-8")
README_MAX_LINES = 300


def _load_updater():
    spec = importlib.util.spec_from_file_location("update_docs", ROOT / "scripts/update_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def command_names() -> list[str]:
    group = typer.main.get_command(app)
    return sorted(group.commands)  # type: ignore[attr-defined]


# ------------------------------------------------------------------ docs/REFERENCE.md


def test_generated_blocks_are_current():
    assert _load_updater().render(REFERENCE) == REFERENCE, "stale: run `make docs`"


def test_every_config_field_is_documented():
    missing = [name for name, *_ in iter_fields() if f"`{name}`" not in REFERENCE]
    assert not missing


def test_every_command_has_a_section_with_an_example():
    for name in command_names():
        heading = f"### `mlb {name}`"
        assert heading in REFERENCE, f"docs/REFERENCE.md has no section for mlb {name}"
        section = REFERENCE.split(heading, 1)[1].split("\n### ", 1)[0]
        assert f"mlb {name}" in section.split("```", 2)[1], f"no example for mlb {name}"


def test_every_history_subcommand_has_an_example():
    history = typer.main.get_command(app).commands["history"]  # type: ignore[attr-defined]
    section = REFERENCE.split("### `mlb history`", 1)[1].split("\n### ", 1)[0]
    missing = [sub for sub in history.commands if f"mlb history {sub} " not in section]
    assert not missing, f"no example for mlb history {missing}"


def test_every_exit_code_is_documented():
    missing = [int(code) for code, _ in EXIT_CODE_TABLE if f"| {int(code)} |" not in REFERENCE]
    assert not missing


def test_updater_refuses_a_file_without_its_blocks():
    with pytest.raises(SystemExit, match="has no config-reference block"):
        _load_updater().render("# a reference without its generated tables\n")


# ------------------------------------------------------------------ README.md: the quick start


def test_readme_is_a_quick_start():
    lines = README.count("\n") + 1
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the reference is docs/"
    for needed in ("make demo", "make test", "mlb throughput", "mlb compare", "mlb ab"):
        assert needed in README, f"the quick start lacks `{needed}`"
    assert "mlb history" in README and "from mlbaseline.api import Baseline" in README
    assert "(docs/REFERENCE.md)" in README, "no link to the reference"


def test_readme_links_every_doc():
    for doc in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{doc.name})" in README, f"README does not link docs/{doc.name}"


@pytest.mark.parametrize("path", [README_PATH, REFERENCE_PATH], ids=lambda p: p.name)
def test_relative_links_resolve(path: Path):
    text = path.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    broken = [t for t in targets if "://" not in t and not (path.parent / t).exists()]
    assert not broken, f"{path.name}: links to missing files {broken}"


# A stated duration: "21 s", "2 min", "about 80 s", "3 minutes", "30 seconds", "a 5-minute tour".
_DURATION = re.compile(r"\b\d[\d.,]*[\s-]?(?:s|ms|µs|min|minutes?|seconds?|h|hours?)\b")
# The intro's motivating example ("from 3 h to 11 h", "from 47 ms to 210 ms") is not a
# measurement of mlb, nor is a setting's value; every other duration must point at the bench
# table that measured it.
_NOT_A_MEASUREMENT = ("3 h to 11 h", "47 ms to 210 ms", "telemetry interval 100 ms")


def test_duration_pattern_finds_timings():
    for stated in ("takes about 21 s", "a 5-minute tour", "2 min 42 s"):
        assert _DURATION.search(stated), stated
    assert not _DURATION.search("batch sizes 16 and 32 (5 vs 5 processes), 3% threshold")


def test_readme_states_no_unmeasured_timing():
    unbacked = [
        line
        for line in README.splitlines()
        if _DURATION.search(line)
        and not any(phrase in line for phrase in _NOT_A_MEASUREMENT)
        and "bench/RESULTS.md" not in line
    ]
    assert not unbacked, f"timings without a `make bench` row: {unbacked}"


def _shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)


def _mlb_command_lines(text: str) -> list[list[str]]:
    """Every `mlb …` line of the ```sh blocks, continuations joined, comments dropped."""
    commands = []
    for block in _shell_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["mlb"]:
                commands.append(words[1:])
    return commands


def _parse(args: list[str]) -> None:
    """Resolve the (sub)command and parse its options as the CLI would, without running it.

    typer vendors click privately (typer._click), so groups are told by their `commands` and
    any exception from the parser is a command line the CLI would refuse.
    """
    command = typer.main.get_command(app)
    name = "mlb"
    while hasattr(command, "commands"):
        name, args = args[0], args[1:]
        command = command.commands[name]
    command.make_context(name, list(args))


@pytest.mark.parametrize("path", [README_PATH, REFERENCE_PATH], ids=lambda p: p.name)
def test_documented_commands_parse(path: Path):
    commands = _mlb_command_lines(path.read_text(encoding="utf-8"))
    assert len(commands) >= 10, "the docs show the commands they describe"
    for args in commands:
        try:
            _parse(args)
        except Exception as exc:  # the parser's usage errors, or KeyError: no such command
            pytest.fail(f"`mlb {' '.join(args)}` is not a valid command line: {exc}")


def test_command_check_catches_a_wrong_option():
    with pytest.raises(Exception, match="no-such-option"):
        _parse(shlex.split("compare a.json b.json --no-such-option"))


def _commands(command, path: tuple[str, ...] = ()):
    """(path, command) of every leaf command: ("run",), ("history", "list"), …"""
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield path, command


def test_every_option_is_documented():
    """Each long option is in its command's section (a history subcommand's: the history
    section) or among the shared options written once before the first command section."""
    shared = REFERENCE.split("## Commands\n", 1)[1].split("\n### ", 1)[0]
    missing = []
    for path, command in _commands(typer.main.get_command(app)):
        section = REFERENCE.split(f"### `mlb {path[0]}`", 1)[1].split("\n### ", 1)[0]
        for param in command.params:
            for opt in param.opts:
                if opt.startswith("--") and opt not in section and opt not in shared:
                    missing.append(f"mlb {' '.join(path)} {opt}")
    assert not missing, f"docs/REFERENCE.md does not document {missing}"


# A repository path written in the text (`examples/own_loop.py`, docs/VERDICTS.md, …); bench/out/
# is make bench's output folder, named with placeholders (RESULTS-<sections>.md).
_REPO_PATH = re.compile(
    r"(?<![\w./-])((?:examples|docs|configs|bench|scripts|tests|mlbaseline)/[\w./-]*\w)"
)


@pytest.mark.parametrize("path", [README_PATH, REFERENCE_PATH], ids=lambda p: p.name)
def test_named_repository_paths_exist(path: Path):
    named = set(_REPO_PATH.findall(path.read_text(encoding="utf-8")))
    missing = sorted(p for p in named if not p.startswith("bench/out/") and not (ROOT / p).exists())
    assert not missing, f"{path.name} names files that do not exist: {missing}"


@pytest.mark.parametrize("path", [README_PATH, REFERENCE_PATH], ids=lambda p: p.name)
def test_python_examples_compile(path: Path):
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert blocks
    for i, block in enumerate(blocks):
        compile(block, f"{path.name} python block {i}", "exec")  # a SyntaxError fails the test


@pytest.mark.parametrize("path", [README_PATH, REFERENCE_PATH], ids=lambda p: p.name)
def test_yaml_examples_are_valid_configs(path: Path, tmp_path: Path):
    blocks = re.findall(r"```yaml\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert blocks
    for i, block in enumerate(blocks):
        config_file = tmp_path / f"mlb{i}.yaml"
        config_file.write_text(block, encoding="utf-8")
        resolve(config_file)  # raises ConfigError on an unknown key or a bad value


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_anchors_name_existing_headings():
    docs = {README_PATH: README, REFERENCE_PATH: REFERENCE}
    slugs = {
        path: {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}
        for path, text in docs.items()
    }
    broken, checked = [], 0
    for path, text in docs.items():
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", text):
            into = (path.parent / target).resolve() if target else path
            if into in slugs:
                checked += 1
                if anchor not in slugs[into]:
                    broken.append(f"{path.name}: {target}#{anchor}")
    assert checked >= 8, "the reference's contents and the README's config link are checked"
    assert not broken, f"links to headings that do not exist: {broken}"


def test_slug_is_githubs():
    assert _slug("Make targets and `make bench`") == "make-targets-and-make-bench"
    assert _slug("Measuring your own training loop (library API)") == (
        "measuring-your-own-training-loop-library-api"
    )


def test_yaml_check_catches_an_unknown_key(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("profile: vision\nthroughput:\n  batch_size: [32]\n", encoding="utf-8")
    with pytest.raises(Exception, match="batch_size"):
        resolve(bad)
