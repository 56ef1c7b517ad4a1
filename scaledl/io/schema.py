"""Pydantic models of the JSON artefacts the product writes and reads back.

:class:`Artefact` is their base (unknown keys, ``NaN`` and infinities refused; frozen), and
:func:`parse_artefact` validates a mapping into one, turning pydantic's errors into one
``ValueError`` whose lines name the artefact, the field path and a bounded excerpt of the value:
``epoch model: field 'coef.0' (value -1000.0): Input should be greater than or equal to 0``.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from scaledl.io.excerpt import excerpt

A = TypeVar("A", bound="Artefact")
_MAX_LINES = 12


class Artefact(BaseModel):
    """Base of the JSON artefacts: strict keys, finite numbers, immutable once read."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


def parse_artefact(model: type[A], data: Any, source: str) -> A:
    """Validate ``data`` (a decoded JSON value) as ``model``.

    Args:
        model: the :class:`Artefact` subclass.
        data: the decoded JSON.
        source: what the data is, for the message (a file, ``"epoch model"``...).

    Returns:
        The validated model.

    Raises:
        ValueError: one line per problem: ``source: field 'a.b' (value ...): what is wrong``.
    """
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ValueError(describe_errors(exc, source)) from None


def describe_errors(exc: ValidationError, source: str, prefix: str = "") -> str:
    """The lines of :func:`parse_artefact`'s message (at most 12, then a count).

    Args:
        exc: pydantic's error.
        source: what the data is (a file), first on every line.
        prefix: the section the fields are under (``"profiling"``: ``'profiling.repeats'``).
    """
    lines = []
    for error in exc.errors():
        if not error["loc"]:  # a check across fields names its fields in its message
            lines.append(f"{source}: {error['msg'].removeprefix('Value error, ')}")
            continue
        field = ".".join(str(p) for p in ((prefix,) if prefix else ()) + tuple(error["loc"]))
        if error["type"] == "missing":
            what = "missing"
        elif error["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            what = "unknown field"
        else:
            what = error["msg"].removeprefix("Value error, ")
        value = "" if error["type"] == "missing" else f" (value {excerpt(error.get('input'))})"
        lines.append(f"{source}: field {field!r}{value}: {what}")
    shown = lines[:_MAX_LINES]
    if len(lines) > len(shown):
        shown.append(f"... and {len(lines) - len(shown)} more")
    return "\n".join(shown)
