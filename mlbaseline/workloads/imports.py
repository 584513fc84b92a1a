"""Import-path factories (`package.module:callable`). Code is imported only from the explicit
paths a user put in the config, never from anywhere else.

Where a module is looked for: `workload.import_paths` (the config file's folder is one of them
when a config file was read), then the current directory, and the installed packages. The folders
are appended to `sys.path` (once; never in front, so a file in the cwd named like a standard or
installed module cannot shadow it), where the user's module, the modules it imports and
DataLoader workers find them. An import that fails says where it looked.

A factory is called with the keyword arguments its signature accepts (`call_factory`'s
`offered`): a model factory that takes `num_classes` is given the workload's `num_classes`,
one that does not is not given it; the config's own `*_kwargs` always win.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mlbaseline.errors import FactoryError

_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def search_paths(extra: Sequence[str] = ()) -> list[str]:
    """The folders a `module:attr` is looked for in besides the installed packages."""
    out: list[str] = []
    for p in [*extra, os.getcwd()]:
        full = os.path.abspath(p)
        if full not in out:
            out.append(full)
    return out


def _add_to_sys_path(paths: Sequence[str]) -> None:
    new = [p for p in paths if p not in sys.path]
    sys.path.extend(new)
    if new:  # a folder's module written after start-up is found too; a known folder's
        importlib.invalidate_caches()  # finder already refreshes on a change of its mtime


def _import(module_name: str, what: str, paths: Sequence[str]) -> Any:
    _add_to_sys_path(paths)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(f"{missing}."):
            where = ", ".join(paths)
            raise FactoryError(
                f"{what}: cannot import module '{module_name}': not found (looked in {where} "
                "and the installed packages; add its folder to workload.import_paths)"
            ) from None
        raise FactoryError(
            f"{what}: importing '{module_name}' failed: it imports '{missing}', which is not "
            "installed"
        ) from None
    except ImportError as exc:
        raise FactoryError(f"{what}: cannot import module '{module_name}' ({exc})") from None
    except Exception as exc:  # the user's module raised while importing
        raise FactoryError(
            f"{what}: importing '{module_name}' raised {exc.__class__.__name__}: {exc}"
        ) from None


def resolve_callable(
    path: str, what: str = "factory", import_paths: Sequence[str] = ()
) -> Callable[..., Any]:
    """'pkg.mod:attr.sub' → the object; every failure is one FactoryError line."""
    if not _PATH.match(path):
        raise FactoryError(
            f"{what}: '{path}' is not an import path of the form package.module:callable"
        )
    module_name, _, attr_path = path.partition(":")
    obj: Any = _import(module_name, what, search_paths(import_paths))
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise FactoryError(f"{what}: '{module_name}' has no attribute '{attr_path}'") from None
    if not callable(obj):
        raise FactoryError(f"{what}: '{path}' is not callable")
    return obj


def accepted(fn: Callable[..., Any], offered: Mapping[str, Any]) -> dict[str, Any]:
    """The `offered` keyword arguments that `fn` names in its signature (a `**kwargs` catch-all
    does not count: the factory may pass it on to something that rejects them)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature: offer nothing
        return {}
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {k: v for k, v in offered.items() if k in params and params[k].kind in kinds}


def call_factory(
    path: str,
    kwargs: dict[str, Any],
    what: str,
    *args: Any,
    offered: Mapping[str, Any] | None = None,
    import_paths: Sequence[str] = (),
) -> Any:
    """Resolve and call with `kwargs`, plus those `offered` keywords the factory's signature
    names and `kwargs` does not set; an exception inside the factory is one FactoryError line."""
    fn = resolve_callable(path, what, import_paths)
    return call_resolved(fn, path, kwargs, what, *args, offered=offered)


def call_resolved(
    fn: Callable[..., Any],
    path: str,
    kwargs: dict[str, Any],
    what: str,
    *args: Any,
    offered: Mapping[str, Any] | None = None,
) -> Any:
    """`call_factory` for a factory already resolved from `path` (no second import)."""
    call_kwargs = {**accepted(fn, offered or {}), **kwargs}
    try:
        return fn(*args, **call_kwargs)
    except FactoryError:
        raise
    except Exception as exc:
        raise FactoryError(f"{what}: '{path}' raised {exc.__class__.__name__}: {exc}") from None
