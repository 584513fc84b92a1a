"""What every command shares: the command skeleton, option types, config loading, error
handling, result output.

A command is its own options plus one call: `@command(NAME)` gives it the shared options (as a
`CommonOptions`) and one-line errors, `execute` does load → show-config → check → run → render
→ emit → exit code. Human output (rich tables, progress bars) goes to stderr; stdout carries
only `--json`.
"""

from __future__ import annotations

import functools
import inspect
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import MISSING, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar, get_args, get_type_hints

import typer
from rich import box
from rich.console import Console, Group
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from mlbaseline import config as cfgmod
from mlbaseline import safewrite, scratch, stopping
from mlbaseline.cli.app import app
from mlbaseline.cli.helptext import PlainCommand, PlainGroup, choices
from mlbaseline.cli.streams import ScreenStream
from mlbaseline.cli.tables import StackTable, fit
from mlbaseline.comparison.labels import check_label
from mlbaseline.errors import ExitCode, MlbError, UsageError
from mlbaseline.progress import NullProgress
from mlbaseline.redact import redact_text
from mlbaseline.results import Result, write_result

T = TypeVar("T")

# the value types of options that default to None ("not given: the config decides")
OptInt = int | None
OptFloat = float | None
OptStr = str | None
OptPath = Path | None


def opt(flag: str, help: str, **kw: Any) -> Any:
    """A `typer.Option` for FLAG with `help` and no default shown (the config holds the
    defaults); `kw` passes on min=, max=, hidden= and the like."""
    return typer.Option(flag, help=help, show_default=False, **kw)


# every command and group spells its parameters as words in --help (see cli/helptext.py)
_Command = PlainCommand
CommandGroup = PlainGroup


ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="YAML config file (overrides the profile).", show_default=False
    ),
]
ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile",
        metavar=choices(*cfgmod.available_profiles()),
        help="Built-in profile (default: demo).",
        show_default=False,
    ),
]
OutputOpt = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Write the result JSON here.", show_default=False),
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print the result JSON on stdout (nothing else on stdout).")
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No tables or progress on stderr.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite existing output.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="Override any config field: --set throughput.min_steps=32 (repeatable).",
        show_default=False,
    ),
]
ShowConfigOpt = Annotated[
    bool, typer.Option("--show-config", help="Print the resolved config as YAML and exit.")
]
NoHistoryOpt = Annotated[
    bool,
    typer.Option("--no-history", help="Do not record the result in the history (mlb history)."),
]
NameOpt = Annotated[
    str | None,
    typer.Option(
        "--name",
        help="Name this run: kept in the result, shown by history list, report and compare.",
        show_default=False,
        metavar="NAME",
    ),
]
TagOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--tag",
        help="Tag this run (repeatable); `mlb history list --tag TAG` finds it.",
        show_default=False,
        metavar="TAG",
    ),
]
# the commands that measure (and so take --name / --tag): their result is a run to label
MEASURING = ("throughput", "attach", "latency", "dataloader", "env-check", "subset", "run", "ab")


class RichProgress:
    """Progress bars on stderr; the core only sees the `Progress` protocol."""

    def __init__(self, console: Console) -> None:
        self.console = console

    @contextmanager
    def task(self, description: str, total: int | None = None) -> Iterator[Any]:
        if not self.console.is_terminal:
            # a pipe or a CI log: a bar cannot redraw there and would only leave blank lines
            # (e.g. before an `Error:` line, which must stay the only line)
            with NullProgress().task(description, total) as task:
                yield task
            return
        columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn()]
        columns += [MofNCompleteColumn(), TimeElapsedColumn()]
        with Progress(*columns, console=self.console, transient=True) as bar:
            task_id = bar.add_task(description, total=total)
            yield _RichTask(bar, task_id)

    def log(self, message: str) -> None:
        self.console.print(message)


@dataclass
class _RichTask:
    bar: Progress
    task_id: Any

    def advance(self, n: int = 1) -> None:
        self.bar.advance(self.task_id, n)

    def update(self, description: str | None = None, total: int | None = None) -> None:
        self.bar.update(self.task_id, description=description, total=total)


@dataclass
class Ui:
    """Console and progress for one command invocation."""

    console: Console
    progress: Any
    quiet: bool

    def print(self, *objects: Any) -> None:
        """Print on stderr unless --quiet; a table too wide for the terminal is stacked into
        narrower ones (cli/tables.py), never cut."""
        if self.quiet:
            return
        for obj in objects:
            # a Group's tables (throughput's two) are fitted one by one
            for item in obj.renderables if isinstance(obj, Group) else [obj]:
                for part in fit(self.console, item) if isinstance(item, Table) else [item]:
                    self.console.print(part)


def make_ui(quiet: bool) -> Ui:
    # stderr, through a stream that outlives its reader (`… 2>&1 | head`: the run still
    # writes its result)
    console = Console(file=ScreenStream(), stderr=True, quiet=quiet)
    return Ui(
        console=console, progress=NullProgress() if quiet else RichProgress(console), quiet=quiet
    )


def fail(message: str, code: int = ExitCode.BAD_INPUT) -> NoReturn:
    """One `Error: …` line on stderr, then exit."""
    # a message can quote user input or a user factory's exception text: keep it one line
    message = " ".join(part.strip() for part in message.splitlines() if part.strip())
    # the last guard of every error message: a URL the message quotes loses its secrets
    typer.echo(f"Error: {redact_text(message)}", err=True)
    raise typer.Exit(int(code))


def guarded(fn: Callable[[], T]) -> T:
    """Run the command body; the tool's own errors become one line and their exit code."""
    try:
        with stopping.stop_signals():  # SIGTERM, SIGHUP: the Ctrl-C paths, their own exit code
            scratch.sweep()  # the scratch trees of runs killed outright (SIGKILL) go now
            return fn()
    except MlbError as exc:
        fail(exc.message, exc.exit_code)
    except KeyboardInterrupt as exc:
        fail(f"interrupted ({stopping.signal_name(exc)})", stopping.exit_code(exc))


def load_config(
    config_file: Path | None,
    profile: str | None,
    sets: list[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> cfgmod.Config:
    """CLI flags (overrides, then --set) > file > profile > default, via config.resolve."""
    merged: dict[str, Any] = dict(overrides or {})
    for key, value in cfgmod.flatten(cfgmod.parse_set(sets or [])).items():
        merged[key] = value
    return cfgmod.resolve(config_file, profile, merged)


def show_config(config: cfgmod.Config) -> NoReturn:
    sys.stdout.write(cfgmod.to_yaml(config))
    raise typer.Exit(0)


def check_output(path: Path | None, force: bool) -> None:
    """Refuse before measuring, not after: an existing output needs --force, and a device,
    FIFO or folder at the name is refused even with it (the one writer's rules)."""
    if path is not None:
        safewrite.check_target(path, force)


def parse_int_list(text: str | None, what: str) -> list[int] | None:
    """'32,64,128' → [32, 64, 128]; None stays None."""
    if text is None:
        return None
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise MlbError(f"{what}: expected comma-separated integers, got '{text}'") from None
    if not values:
        raise MlbError(f"{what}: expected at least one value")
    return values


def exit_code_for(result: Result) -> ExitCode:
    if result.status == "interrupted":
        return ExitCode(stopping.exit_code())  # 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP
    if result.verdict.failed or result.status == "failed":
        return ExitCode.FAILED
    return ExitCode.OK


def record_in_history(paths: Sequence[Path], cfg: cfgmod.Config, ui: Ui) -> None:
    """Record written result files in the history store (mlb history). A store that cannot
    take them (locked, corrupt, foreign) costs a warning, never the result file."""
    from mlbaseline.runners import history

    try:
        done = history.record(paths, cfg)
    except Exception as exc:  # any store or driver fault: the result file is already safe
        message = exc.message if isinstance(exc, MlbError) else f"{type(exc).__name__}: {exc}"
        message = redact_text(" ".join(message.split()))
        typer.echo(f"warning: not recorded in the history ({message}); the file is kept", err=True)
        return
    where = history.shown_location(cfg)
    for rec in done:
        ui.print(f"[dim]recorded in the history as #{rec.id} ({where})[/dim]")


def emit(
    result: Result,
    output: Path | None,
    json_out: bool,
    force: bool,
    ui: Ui,
    recorder: Callable[[Path], None] | None = None,
) -> NoReturn:
    """Write the result file (atomically), record it (`recorder`), print JSON if asked, exit
    with the verdict's code."""
    if output is not None:
        write_result(result, output, force=force)
        ui.print(f"[dim]result written to {output}[/dim]")
        if recorder is not None:
            recorder(output)
    finish(result, json_out, ui)


def finish(result: Result, json_out: bool, ui: Ui) -> NoReturn:
    """The end every command shares, whoever wrote the file: JSON on stdout if asked, the
    result's warnings and an incomplete status on the screen, exit with the verdict's code."""
    if json_out:
        sys.stdout.write(result.to_json())
    for warning in result.warnings:
        ui.print(f"[yellow]warning:[/yellow] {warning.get('message', warning)}")
    if result.status != "complete":
        ui.print(f"[red]status: {result.status}[/red] {'; '.join(result.notes)}")
    raise typer.Exit(int(exit_code_for(result)))


def compact_table(title: str, caption: str | None = None, secondary: tuple[str, ...] = ()) -> Table:
    """A table for an 80-column log: a rule under the header, one space between columns and no
    side borders, so that columns set `no_wrap` (figures, verdicts) fit uncut. `secondary`:
    the headers of the columns that move to a second table when it is still too wide."""
    return StackTable(
        secondary=secondary,
        title=title,
        caption=caption,
        title_justify="left",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=0,
    )


class Notes:
    """Reasons too long for an 80-column table cell: the cell gets a mark `[n]`, the reason
    goes under the table as `[n] reason` (one number per distinct reason)."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def mark(self, reason: str) -> str:
        if reason not in self.texts:
            self.texts.append(reason)
        return f"[{self.texts.index(reason) + 1}]"

    def print(self, ui: Ui) -> None:
        for i, text in enumerate(self.texts, 1):
            ui.print(escape(f"[{i}] {text}"))


def dump_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=str) + "\n"


# ---------------------------------------------------------------- the command skeleton


@dataclass(frozen=True)
class CommonOptions:
    """The options every command takes (and DATA, for the commands that read data)."""

    config: Path | None = None
    profile: str | None = None
    output: Path | None = None
    json_out: bool = False
    quiet: bool = False
    force: bool = False
    sets: list[str] | None = None
    show_config: bool = False
    no_history: bool = False
    data: Path | None = None
    name: str | None = None  # --name / --tag, on the MEASURING commands
    tags: list[str] | None = None


DataAliasOpt = Annotated[
    Path | None,
    # the spellings before DATA was a positional argument everywhere: still accepted, not shown
    typer.Option("--data", "--data-dir", hidden=True, show_default=False),
]
_SHARED = {
    "config": ConfigOpt,
    "profile": ProfileOpt,
    "output": OutputOpt,
    "json_out": JsonOpt,
    "quiet": QuietOpt,
    "force": ForceOpt,
    "sets": SetOpt,
    "show_config": ShowConfigOpt,
    "no_history": NoHistoryOpt,
}
_LABEL = {"name": NameOpt, "tags": TagOpt}
# what only a command that writes a result takes: the history's own commands (list, show,
# trend, …) read the store, so a profile, a resolved config or --no-history mean nothing there
_RESULT_ONLY = ("profile", "show_config", "no_history")
StoreSetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="Override a config field: --set history.store=other.sqlite (repeatable).",
        show_default=False,
    ),
]
_DEFAULTS = {f.name: f.default for f in fields(CommonOptions)}


def data_argument(help: str) -> Any:
    """DATA, the data location, as an optional positional argument with `help`; the old
    spellings stay hidden options, named here so that `--help` still finds them."""
    help = f"{help} (--data DIR and --data-dir DIR still work.)"
    return Annotated[Path | None, typer.Argument(help=help, show_default=False, metavar="DATA")]


def _shared_params(
    output: Any,
    output_default: Any,
    data: str | None,
    measuring: bool = False,
    result: bool = True,
    own: Mapping[str, Any] | None = None,
) -> list[inspect.Parameter]:
    annotations: dict[str, Any] = {**_SHARED, "output": output, **(_LABEL if measuring else {})}
    if not result:
        annotations = {k: v for k, v in annotations.items() if k not in _RESULT_ONLY}
        annotations["sets"] = StoreSetOpt
    annotations |= {k: v for k, v in (own or {}).items() if k in annotations}
    if data is not None:
        annotations = {"data": data_argument(data), "data_alias": DataAliasOpt, **annotations}
    defaults = {**_DEFAULTS, "output": output_default, "data_alias": None}
    # a shared flag that takes a value here (attach's --json PATH) is unset by default
    defaults |= {k: None for k, v in (own or {}).items() if get_args(v)[:1] not in ((bool,), ())}
    kind = inspect.Parameter.KEYWORD_ONLY
    return [
        inspect.Parameter(name, kind, annotation=hint, default=defaults[name])
        for name, hint in annotations.items()
    ]


def _common_from(kwargs: dict[str, Any], measuring: bool = False) -> CommonOptions:
    """Take the shared options out of a command's keyword arguments (and --name / --tag of a
    measuring command: another command may have options of those names)."""
    data, alias = kwargs.pop("data", None), kwargs.pop("data_alias", None)
    if data is not None and alias is not None and data != alias:
        raise UsageError(f"the data location is given twice: {data} and {alias}")
    shared = {name: kwargs.pop(name) for name in _SHARED if name in kwargs}
    label = {name: kwargs.pop(name) for name in _LABEL} if measuring else {}
    return CommonOptions(**shared, **label, data=data if data is not None else alias)


def label_overrides(common: CommonOptions) -> dict[str, Any]:
    """--name / --tag as config overrides (`history.name`, `history.tags`: comparison.labels
    says why there); a blank name or a tag with a comma is a usage error."""
    problems = check_label(common.name, common.tags)
    if problems:
        raise UsageError(problems[0])
    out: dict[str, Any] = {}
    if common.name is not None:
        out["history.name"] = common.name
    if common.tags:
        out["history.tags"] = list(dict.fromkeys(common.tags))  # a tag given twice is one
    return out


def _own_params(cls: type) -> list[inspect.Parameter]:
    """Typer parameters from the fields of a command's options dataclass, in field order (each
    field annotated as Typer wants a parameter: `Annotated[int | None, typer.Option(...)]`)."""
    hints = get_type_hints(cls, include_extras=True)
    kind = inspect.Parameter.KEYWORD_ONLY
    return [
        inspect.Parameter(
            f.name,
            kind,
            annotation=hints[f.name],
            default=inspect.Parameter.empty if f.default is MISSING else f.default,
        )
        for f in fields(cls)
    ]


def command(
    name: str,
    *,
    output: Any = OutputOpt,
    output_default: Any = None,
    data: str | None = None,
    on: typer.Typer | None = None,
    result: bool = True,
    shared: Mapping[str, Any] | None = None,
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register `fn(common)` or `fn(common, opts)` as `mlb NAME`.

    `opts` is annotated with the command's options dataclass (fields annotated as Typer
    parameters). Typer sees those, then DATA (when `data`, its help, is given; `--data` and
    `--data-dir` stay as hidden aliases), then the shared options (`output` and
    `output_default` replace --output's type and default). fn gets them as one
    `CommonOptions` and one options object; a tool error or Ctrl-C anywhere in it is one
    `Error:` line. `on`: the (sub-)app to register on, e.g. `mlb history`'s (default: `mlb`).
    `result=False`: a command that writes no result (the history's own): no --profile,
    --show-config or --no-history, and --set names a history field. `shared`: a shared option
    that means something else here, by name, e.g. {"force": …} for `history rm`'s help.
    """

    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        own = list(inspect.signature(fn, eval_str=True).parameters.values())[1:]  # not common
        cls = own[0].annotation if own and is_dataclass(own[0].annotation) else None
        measuring = on is None and name in MEASURING
        options = _shared_params(output, output_default, data, measuring, result, shared)
        params = (_own_params(cls) if cls else own) + options

        @functools.wraps(fn)
        def wrapper(**kwargs: Any) -> None:
            def body() -> None:
                # leaves the command's own options in kwargs
                common = _common_from(kwargs, measuring)
                fn(common, cls(**kwargs)) if cls else fn(common, **kwargs)

            guarded(body)

        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        (on or app).command(name, cls=_Command)(wrapper)
        return fn

    return decorate


def execute(
    common: CommonOptions,
    measure: Callable[[cfgmod.Config, Ui], Result | None],
    overrides: Mapping[str, Any] | None = None,
    *,
    prepare: Callable[[cfgmod.Config], None] | None = None,
    outputs: Sequence[Path | None] | None = None,
    render: Callable[[Result, Ui], None] | None = None,
    write: bool = True,
    written: Callable[[Result], Path | None] | None = None,
) -> None:
    """The body every command shares: load the config (CLI overrides, then --set), print it
    and exit on --show-config, `prepare` (more input checks), refuse existing `outputs`
    (default: --output) without --force, make the UI, `measure`, `render`, then emit: write
    --output, then `finish` (--json, warnings, status, the verdict's exit code). `write=False`:
    the command wrote its own file, which `written` names; `finish` still runs. A measure that
    returns None has done its own output: exit 0. Every result file written is recorded in the
    history unless --no-history or `history.record: false`."""
    overrides = {**(overrides or {}), **label_overrides(common)}
    cfg = load_config(common.config, common.profile, common.sets, overrides)
    if common.show_config:
        show_config(cfg)
    if prepare is not None:
        prepare(cfg)
    for path in (common.output,) if outputs is None else outputs:
        check_output(path, common.force)
    ui = make_ui(common.quiet)
    result = measure(cfg, ui)
    if result is None:
        return
    stopping.annotate(result)  # an interrupted result names the signal that stopped it
    if render is not None:
        render(result, ui)
    recording = cfg.history.record and not common.no_history

    def recorder(path: Path) -> None:
        record_in_history([path], cfg, ui)

    if not write:
        own = written(result) if written is not None and recording else None
        if own is not None and own.is_file():
            recorder(own)
        finish(result, common.json_out, ui)
    emit(result, common.output, common.json_out, common.force, ui, recorder if recording else None)
