"""Import-path factories (`package.module:callable`). Code is imported only from the explicit
paths a user put in the config, never from anywhere else."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

from mlbaseline.errors import FactoryError

_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def resolve_callable(path: str, what: str = "factory") -> Callable[..., Any]:
    """'pkg.mod:attr.sub' → the object; every failure is one FactoryError line."""
    if not _PATH.match(path):
        raise FactoryError(
            f"{what}: '{path}' is not an import path of the form package.module:callable"
        )
    module_name, _, attr_path = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise FactoryError(f"{what}: cannot import module '{module_name}' ({exc})") from None
    except Exception as exc:  # the user's module raised while importing
        raise FactoryError(
            f"{what}: importing '{module_name}' raised {exc.__class__.__name__}: {exc}"
        ) from None
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise FactoryError(f"{what}: '{module_name}' has no attribute '{attr_path}'") from None
    if not callable(obj):
        raise FactoryError(f"{what}: '{path}' is not callable")
    return obj


def call_factory(path: str, kwargs: dict[str, Any], what: str, *args: Any) -> Any:
    """Resolve and call; an exception inside the user's factory becomes one FactoryError line."""
    fn = resolve_callable(path, what)
    try:
        return fn(*args, **kwargs)
    except FactoryError:
        raise
    except Exception as exc:
        raise FactoryError(f"{what}: '{path}' raised {exc.__class__.__name__}: {exc}") from None
