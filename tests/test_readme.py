"""The README is part of the interface: a missing command or config field fails the build."""

import importlib.util
from pathlib import Path

import typer.main

from mlbaseline.cli import app
from mlbaseline.config import iter_fields

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _load_updater():
    spec = importlib.util.spec_from_file_location(
        "update_readme", ROOT / "scripts/update_readme.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def command_names() -> list[str]:
    group = typer.main.get_command(app)
    return sorted(group.commands)  # type: ignore[attr-defined]


def test_generated_blocks_are_current():
    assert _load_updater().render(README) == README, "README is stale: run `make docs`"


def test_every_config_field_is_documented():
    missing = [name for name, *_ in iter_fields() if f"`{name}`" not in README]
    assert not missing


def test_every_command_has_a_section_with_an_example():
    for name in command_names():
        heading = f"### `mlb {name}`"
        assert heading in README, f"README has no section for mlb {name}"
        section = README.split(heading, 1)[1].split("\n### ", 1)[0]
        assert f"mlb {name}" in section.split("```", 2)[1], f"no example for mlb {name}"


def test_two_fresh_machine_commands():
    assert "make demo" in README and "make test" in README
