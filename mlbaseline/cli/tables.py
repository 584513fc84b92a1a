"""Tables that fit the terminal without cutting a value.

rich shrinks a table wider than the console by cutting cells ("+196.…") or folding words
mid-way ("torchvi/sion"). `fit` instead stacks: when a table's narrowest uncut layout is wider
than the console, its columns are split over several tables, each repeating the first (key)
column, so every number is printed whole and every row can still be read by its key.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

# the measuring width: wide enough that a table's own minimum, not the console, limits it
_UNBOUNDED = 10_000


def min_width(console: Console, table: Table) -> int:
    """The narrowest width at which no cell is cut: no_wrap cells whole, text wrapped only
    between words."""
    options = console.options.update(width=_UNBOUNDED, max_width=_UNBOUNDED)
    # rich measures a cell's minimum as its longest word even in a no_wrap column (which it
    # then cuts): such a column's minimum is its widest cell, given as the column's min_width
    whole = copy.copy(table)
    whole.columns = []
    for column in table.columns:
        if column.no_wrap:
            cells = [column.header, *column.cells]
            widest = max(Measurement.get(console, options, c).maximum for c in cells)
            column = dataclasses.replace(column, min_width=max(widest, column.min_width or 0))
        whole.columns.append(column)
    return Measurement.get(console, options, whole).minimum


class StackTable(Table):
    """A table that names its less important columns (`secondary`, by header): when it must
    be stacked, they are the ones moved to the table below. `keys`: how many leading columns
    name a row (repeated in every part), e.g. 2 for (batch size, part)."""

    def __init__(
        self, *args: Any, secondary: tuple[str, ...] = (), keys: int = 1, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.secondary = secondary
        self.keys = keys


def _part(table: Table, columns: list[int], first: bool) -> Table:
    """The table with only `columns` (a copy: the caller's table is left as it was)."""
    part = copy.copy(table)
    part.columns = [dataclasses.replace(table.columns[i], _index=n) for n, i in enumerate(columns)]
    part.rows = list(table.rows)
    part.title = table.title if first else None
    part.caption = None  # printed once, under the last part, at the console's width
    return part


def _groups(console: Console, table: Table) -> list[list[int]]:
    """Column indexes per part: the key columns in each; the first part takes the primary
    columns that fit, in order, and the rest (and every secondary column) follow."""
    secondary = set(getattr(table, "secondary", ()))
    headers = [str(c.header) for c in table.columns]
    keys = list(range(min(getattr(table, "keys", 1), len(headers) - 1)))
    rest = range(len(keys), len(headers))
    order = [i for i in rest if headers[i] not in secondary]
    order += [i for i in rest if headers[i] in secondary]
    groups: list[list[int]] = []
    current: list[int] = list(keys)
    for i in order:
        demoted = headers[i] in secondary and not groups
        trial = _part(table, sorted([*current, i]), first=not groups)
        if len(current) > len(keys) and (demoted or min_width(console, trial) > console.width):
            groups.append(current)
            current = [*keys, i]
        else:
            current = sorted([*current, i])
    return [*groups, current]


def fit(console: Console, table: Table) -> list[RenderableType]:
    """`table` as one or more tables no wider than the console, none cutting a value, then
    its caption. A key with one other column that still does not fit is left to rich
    (nothing narrower exists without cutting)."""
    if len(table.columns) < 2 or min_width(console, table) <= console.width:
        return [table]
    parts: list[RenderableType] = [
        _part(table, g, first=n == 0) for n, g in enumerate(_groups(console, table))
    ]
    caption = table.caption
    if isinstance(caption, str):
        caption = Text.from_markup(caption, style=table.caption_style or "table.caption")
    return parts + ([caption] if caption is not None else [])
