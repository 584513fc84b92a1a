"""A result's run name and tags (`--name` / `--tag`, config `history.name` / `history.tags`).

They live in the config's `history` section, which is not part of what was measured: the config
hash and the comparability fingerprint leave that section out, so two runs named differently
stay one series. An `ab` result's config holds one config per arm; both arms carry the label
the command was given. Read by the history record, the report's headline and `mlb compare`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunLabel:
    name: str = ""
    tags: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.name or self.tags)

    def text(self) -> str:
        """'baseline-v2 [nightly, gpu]', 'baseline-v2', '[nightly]' or ''."""
        tags = f"[{', '.join(self.tags)}]" if self.tags else ""
        return " ".join(part for part in (self.name, tags) if part)


def _history_section(config: Mapping[str, Any]) -> Mapping[str, Any]:
    section = config.get("history")
    if isinstance(section, Mapping):
        return section
    arm = config.get("a")  # an ab result: {a: config, b: config}
    if isinstance(arm, Mapping) and isinstance(arm.get("history"), Mapping):
        return arm["history"]
    return {}


def run_label(config: Mapping[str, Any] | None) -> RunLabel:
    """The label of a result's `config` (a file written before labels existed has none)."""
    section = _history_section(config or {})
    name = section.get("name")
    tags = section.get("tags")
    return RunLabel(
        name=name if isinstance(name, str) else "",
        tags=tuple(t for t in tags if isinstance(t, str)) if isinstance(tags, list) else (),
    )


def names_of(configs: Sequence[Mapping[str, Any] | None]) -> str:
    """The distinct labels of several results' configs, joined: 'nightly [gpu], try-2' ('' when
    none has one); backticks dropped, so the text sits in Markdown code spans."""
    texts = (run_label(c).text().replace("`", "'") for c in configs)
    return ", ".join(dict.fromkeys(t for t in texts if t))


def check_label(
    name: str | None, tags: Sequence[str] | None, flags: tuple[str, str] = ("--name", "--tag")
) -> list[str]:
    """Problems with a name and tags given on the command line or to the API, as
    `--name: …` lines (`flags`: what the caller calls them; empty list: fine). A tag is a word
    to filter on: no commas or spaces at its ends, none empty; a name or tag is one line."""
    problems = []
    if name is not None and (not name.strip() or "\n" in name):
        problems.append(f"{flags[0]}: expected one non-empty line of text, got {name!r:.40}")
    for tag in tags or ():
        if not tag.strip() or tag != tag.strip() or "," in tag or "\n" in tag:
            problems.append(f"{flags[1]}: expected a word without commas, got {tag!r:.40}")
    return problems


__all__ = ["RunLabel", "check_label", "names_of", "run_label"]
