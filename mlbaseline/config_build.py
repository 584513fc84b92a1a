"""Plain data → typed dataclasses, and the dotted-tree helpers config sources are merged with.

`build(cls, mapping)` checks every value against its field's annotation and its metadata's
range (`min`, `gt`, `max`, `choices`, `nonempty`) and names the field's path in each error
(`throughput.min_steps: must be ≥ 1, got 0`); an unknown key gets a did-you-mean. `config.py`
holds the schema and the precedence that uses these; the result documents have their own typed
models (`documents/`).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

import yaml

from mlbaseline import yamlread
from mlbaseline.errors import ConfigError

_YAML11_FLOAT = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)[eE][-+]?\d+$")


def type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(type_name(a) for a in typing.get_args(tp))
    if origin is not None:
        return getattr(origin, "__name__", str(origin))
    return "null" if tp is type(None) else getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, path: str) -> Any:
    """Check `value` against the annotation `tp`; ints are accepted for floats."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        others = [a for a in args if a is not type(None)]
        if len(others) == 1:  # `float | None`: the float's own message says more
            return _coerce(value, others[0], path)
        for arg in others:
            try:
                return _coerce(value, arg, path)
            except ConfigError:
                continue
        raise ConfigError(f"{path}: expected {type_name(tp)}, got {type(value).__name__}")
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected a list, got {type(value).__name__}")
        return [_coerce(v, args[0], f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {type(value).__name__}")
        return {str(k): _coerce(v, args[1], f"{path}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str) and _YAML11_FLOAT.match(value.strip()):
            value = float(value)  # PyYAML reads `1e-9` (no dot) as a string: YAML 1.1 quirk
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        try:
            number = float(value)
        except OverflowError:  # a 400-digit integer
            number = math.inf
        if not math.isfinite(number):  # every range check is False for NaN: refuse it here
            raise ConfigError(f"{path}: expected a finite number, got {number!r}")
        return number
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{path}: unsupported type {tp!r}")  # pragma: no cover - schema bug


def _check_range(value: Any, meta: Mapping[str, Any], path: str) -> None:
    if meta.get("nonempty") and isinstance(value, list) and not value:
        raise ConfigError(f"{path}: needs at least one value")
    items = value if isinstance(value, list) else [value]
    for item in items:
        if item is None or isinstance(item, (bool, str, dict)):
            if "choices" in meta and item is not None and item not in meta["choices"]:
                choices = ", ".join(map(str, meta["choices"]))
                raise ConfigError(f"{path}: {item!r} is not one of {choices}")
            continue
        if "min" in meta and item < meta["min"]:
            raise ConfigError(f"{path}: must be ≥ {meta['min']}, got {item}")
        if "gt" in meta and item <= meta["gt"]:
            raise ConfigError(f"{path}: must be > {meta['gt']}, got {item}")
        if "max" in meta and item > meta["max"]:
            raise ConfigError(f"{path}: must be ≤ {meta['max']}, got {item}")


def _unknown_key(key: str, known: list[str], path: str) -> ConfigError:
    where = f"{path}.{key}" if path else key
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(f"{where}: unknown key{hint}")


def build(cls: type, data: Mapping[str, Any], path: str = "") -> Any:
    """Build the dataclass `cls` from a mapping, with errors as `path.to.field: message`."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            raise _unknown_key(str(key), list(fields), path)
        where = f"{path}.{key}" if path else str(key)
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            kwargs[key] = build(tp, value if value is not None else {}, where)
            continue
        coerced = _coerce(value, tp, where)
        _check_range(coerced, fields[key].metadata, where)
        kwargs[key] = coerced
    return cls(**kwargs)


# ---------------------------------------------------------------- dotted trees


def deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """Merge `top` over `base`; nested mappings merge, everything else is replaced."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_set(items: list[str]) -> dict[str, Any]:
    """`--set a.b=VALUE` pairs into a nested mapping; VALUE is parsed as YAML (safe_load)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item}: expected KEY=VALUE, e.g. throughput.min_steps=32")
        try:
            value = yamlread.load(raw)
        except yamlread.YamlLimitError as exc:
            raise ConfigError(f"--set {key.strip()}: {exc.problem}") from None
        except yaml.YAMLError:
            raise ConfigError(f"--set {item}: value is not valid YAML") from None
        out = deep_merge(out, nest(key.strip(), value))
    return out


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} → {'a.b': 1}; the inverse of `nest` (empty mappings stay leaves)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{dotted}."))
        else:
            out[dotted] = value
    return out


def nest(dotted: str, value: Any) -> dict[str, Any]:
    """'a.b.c', v → {'a': {'b': {'c': v}}}."""
    node: Any = value
    for part in reversed(dotted.split(".")):
        node = {part: node}
    return node


__all__ = ["build", "deep_merge", "flatten", "nest", "parse_set", "type_name"]
