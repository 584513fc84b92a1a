"""The end of `execute` (cli/common.py) is the same whether the command wrote its own file
(`mlb run`, `write=False`) or `emit` wrote it: warnings and an incomplete status are shown."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from mlbaseline.cli.common import CommonOptions, Ui, execute
from mlbaseline.results import Result

runner = CliRunner()


def _result(status: str = "complete") -> Result:
    r = Result(kind="throughput", config={})
    r.warn("cpu_governor", "the CPU governor is 'powersave'")
    if status != "complete":
        r.mark(status, "stopped at phase 2")
    return r


def _app(result: Result, write: bool, json_out: bool = False) -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def main() -> None:
        common = CommonOptions(json_out=json_out, no_history=True)

        def measure(cfg: object, ui: Ui) -> Result:
            return result

        execute(common, measure, outputs=(), write=write)

    return app


@pytest.mark.parametrize("write", [True, False], ids=["emit", "own-file"])
def test_warnings_are_printed_whoever_writes_the_file(write: bool):
    out = runner.invoke(_app(_result(), write), [])
    assert out.exit_code == 0, out.output
    assert "warning: the CPU governor is 'powersave'" in out.stderr


@pytest.mark.parametrize("write", [True, False], ids=["emit", "own-file"])
def test_an_incomplete_status_is_printed_whoever_writes_the_file(write: bool):
    out = runner.invoke(_app(_result("interrupted"), write), [])
    assert out.exit_code != 0
    assert "status: interrupted stopped at phase 2" in out.stderr


def test_own_file_json_still_goes_to_stdout():
    out = runner.invoke(_app(_result(), write=False, json_out=True), [])
    assert json.loads(out.stdout)["warnings"][0]["code"] == "cpu_governor"
