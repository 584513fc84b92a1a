"""Typed result documents: one pydantic v2 model per result kind, validated once on reading.

`load_document(body, where)` is the one reader of a result file's bytes: JSON, the schema
version (an older minor is upgraded, an unknown major refused), the kind, then the whole
document against `model_for(kind)`; every problem is one `ResultFileError` line
`FILE: path.to.field: expected <what>, got <value>`. `results.parse_result` turns the checked
document into a `Result`; the history reads its stored documents through the same function.

The models: `base` (the envelope and the parts every kind shares) and one `data_<kind>` module
per kind (`-` → `_`) exporting `Data`, the model of that kind's `data` payload. See
docs/DOCUMENTS.md for the layout, the error format and the versioning rules.
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Iterable
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter, ValidationError, create_model
from pydantic_core import from_json

from mlbaseline.documents.base import KINDS, ArmsConfig, Envelope, one_line
from mlbaseline.documents.versions import upgrade
from mlbaseline.errors import ResultFileError


def data_model(kind: str) -> type[BaseModel]:
    """The `Data` model of `kind`'s payload (module `documents.data_<kind>`, `-` → `_`)."""
    module = importlib.import_module(f"{__name__}.data_{kind.replace('-', '_')}")
    model: type[BaseModel] = module.Data
    return model


@functools.cache
def model_for(kind: str) -> type[Envelope]:
    """The whole document of `kind`: the envelope with its typed `data` (and an `ab` result's
    config, one resolved config per arm)."""
    fields: dict[str, Any] = {
        "kind": (Literal[kind], ...),  # type: ignore[valid-type]
        "data": (data_model(kind) | None, None),
    }
    if kind == "ab":
        fields["config"] = (ArmsConfig, Field(default_factory=ArmsConfig))
    return create_model(f"Document_{kind.replace('-', '_')}", __base__=Envelope, **fields)


@functools.cache
def _any_document() -> TypeAdapter[Any]:
    """Every kind's model in one, chosen by `kind`: validates a file's bytes before anything
    else is built from them (see load_document)."""
    models = tuple(model_for(kind) for kind in KINDS)
    return TypeAdapter(Annotated[Union[models], Field(discriminator="kind")])  # noqa: UP007


def parse_json(body: bytes, where: str) -> Any:
    """The JSON value of a file's bytes, or one line saying why it has none."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultFileError(f"{where}: cannot read ({exc.__class__.__name__})") from None
    if not text.strip():
        raise ResultFileError(f"{where}: empty file")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultFileError(
            f"{where}: not valid JSON (line {exc.lineno}, column {exc.colno}; truncated?)"
        ) from None
    except RecursionError:
        raise ResultFileError(f"{where}: not valid JSON (nested too deeply)") from None


def load_document(body: bytes, where: str, kinds: Iterable[str] | None = None) -> dict[str, Any]:
    """The checked document of a result file's bytes (upgraded to the current version).

    A sound file (the usual case) is validated from its bytes first, and its model dropped
    before the document the Result is made of is parsed (by pydantic's own parser too, jiter:
    several times faster than json.loads on long lists of samples), so the two never occupy
    memory together (bench section `documents`). Only a file that fails is parsed by json.loads
    first, for the friendlier errors of JSON, version and kind, and then validated again for
    the one line that names the field."""
    try:
        _any_document().validate_json(body)
    except ValidationError:
        doc, reshaped = upgrade(parse_json(body, where), where)
        check_kind(doc, where, kinds)
        validate(doc, where, body if not reshaped else None)
        return doc
    doc, reshaped = upgrade(from_json(body), where)
    check_kind(doc, where, kinds)
    if reshaped:  # an upgrader that changed the shape: validate the document as it reads now
        validate(doc, where)
    return doc


def check_kind(doc: dict[str, Any], where: str, kinds: Iterable[str] | None = None) -> None:
    kind = doc.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise ResultFileError(f"{where}: unknown result kind {kind!r:.40}")
    allowed = tuple(kinds) if kinds is not None else ()
    if allowed and kind not in allowed:
        raise ResultFileError(f"{where}: is a '{kind}' result; expected {' or '.join(allowed)}")


def validate(doc: dict[str, Any], where: str, body: bytes | None = None) -> None:
    """Validate `doc` (whose JSON text is `body`, when the caller has it) against its kind's
    model; the model itself is dropped: readers use the document, now known to be sound."""
    if body is None:
        # a NaN in a document built in memory reaches the model as a NaN and is refused there
        body = json.dumps(doc, allow_nan=True).encode("utf-8")
    try:
        model_for(doc["kind"]).model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        if first["type"] == "json_invalid":  # JSON that json.loads took: nested too deeply
            raise ResultFileError(f"{where}: not valid JSON ({first['ctx']['error']})") from None
        raise ResultFileError(one_line(exc, where, doc)) from None


__all__ = [
    "check_kind",
    "data_model",
    "load_document",
    "model_for",
    "parse_json",
    "validate",
]
