"""How `--help` spells a parameter: a word, never a Python type name.

Typer shows an option's value as its Python annotation (`<bool>` beside a flag,
`<list[str]>`, `<int range>`) and a required argument as `{old}`. Every command and group of
`mlb` gets its parameters through `PlainCommand` / `PlainGroup`, which rename them the way
man pages do: `--last N`, `--set KEY=VALUE`, `--fail-on [regressed|any|never]`, `OLD NEW`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args, get_origin

import typer.core

# the value word per annotation; a choice shows its choices instead
_WORDS: dict[Any, str] = {int: "N", float: "NUMBER", str: "TEXT", Path: "PATH"}


def _element(annotation: Any) -> Any:
    """The element type of `list[X]` (a repeatable option or a variadic argument)."""
    if get_origin(annotation) is list:
        return get_args(annotation)[0]
    return annotation


def value_word(param: Any) -> str:
    """`[a|b|c]` for a choice, else the plain word for the value's type (TEXT if unknown)."""
    desc = param.type_descriptor
    if desc.is_choice:
        return "[" + "|".join(str(getattr(c, "value", c)) for c in desc.choices) + "]"
    if desc.is_path:
        return "PATH"
    return _WORDS.get(_element(desc.annotation), "TEXT")


def choices(*values: str) -> str:
    """The metavar of an option whose values the config checks: `[a|b|c]`, as a choice's."""
    return "[" + "|".join(values) + "]"


class _PlainArgument(typer.core.TyperArgument):
    """An argument named in capitals (`OLD`, `[DATA]`, `[INPUTS]...`), its value as a word."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return value_word(self)

    def _usage_display_name(self) -> str:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + ("..." if self.nargs != 1 else "")


def _esc_markdown(text: str | None) -> str | None:
    """Help is rendered as Markdown: a glob's `*` would become emphasis and vanish."""
    if text is None:
        return None
    return text.replace("\\*", "*").replace("*", "\\*")


def plain_params(params: list[Any]) -> list[Any]:
    """Give each parameter its man-page spelling (idempotent: help may be asked twice)."""
    for param in params:
        param.help = _esc_markdown(getattr(param, "help", None))
        if isinstance(param, typer.core.TyperArgument):
            if type(param) is typer.core.TyperArgument:
                param.__class__ = _PlainArgument  # same fields, help spelling only
            if param.metavar is None:
                param.metavar = (param.name or "").upper()
        elif getattr(param, "is_flag", False):
            param.metavar = param.metavar or ""  # a flag takes no value
        elif param.metavar is None and isinstance(param, typer.core.TyperOption):
            param.metavar = value_word(param)
    return params


class PlainCommand(typer.core.TyperCommand):
    """A command whose `--help` shows values as words and choices as choices."""

    def get_params(self, ctx: Any) -> list[Any]:
        self.help = _esc_markdown(self.help)
        return plain_params(super().get_params(ctx))


class PlainGroup(typer.core.TyperGroup):
    """A command group (`mlb`, `mlb history`) with the same help spelling."""

    def get_params(self, ctx: Any) -> list[Any]:
        return plain_params(super().get_params(ctx))
