"""Values a request may carry: finite numbers, Unicode text, and strategy options of bounded size.

Python's JSON parser reads ``NaN`` and ``Infinity``, and ``"\\ud800"`` as a lone surrogate, which no
store, log or response can encode. No solve can use either, so :class:`JsonRequest` refuses them
anywhere in a request body (graph metadata and option names included) before any field is validated:
a 422 naming where, never a job that fails, a 503 from the store or a 500 from the response.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import BaseModel, PlainValidator, StringConstraints, model_validator
from pydantic_core import PydanticCustomError

__all__ = ["MAX_OPTION_TEXT", "JsonRequest", "OptionName", "OptionValue", "first_unusable"]

MAX_OPTION_TEXT = 1000
"""Most characters of a strategy option's text value (the longest any strategy reads is a path's name)."""
_SURROGATE = re.compile("[\ud800-\udfff]")

Path = tuple[str | int, ...]


def _why_unusable(value: object) -> tuple[str, str] | None:
    """(error type, what is wrong) when ``value`` is a number that is not finite or text that is not Unicode."""
    if isinstance(value, float) and not math.isfinite(value):
        return "finite_number", "NaN and Infinity are not numbers a solve can use; give a finite number"
    if isinstance(value, str) and not value.isascii() and _SURROGATE.search(value):
        return "string_unicode", "the text holds a lone surrogate (\\ud800 to \\udfff) and is not valid Unicode"
    return None


def first_unusable(value: Any) -> tuple[Path, str, str] | None:
    """Where parsed JSON ``value`` first holds a number that is not finite or text that is not Unicode (in a
    value or an object's key), with the error type and what is wrong; None when it holds neither."""
    stack: list[tuple[Any, Path]] = [(value, ())]
    while stack:
        item, at = stack.pop()
        children: Iterable[tuple[str | int, Any]]
        if isinstance(item, dict):
            children = item.items()
        elif isinstance(item, list):
            children = enumerate(item)
        else:
            found = _why_unusable(item)
            if found:
                return (at, *found)
            continue
        for key, child in children:
            if isinstance(key, str) and (found := _why_unusable(key)):
                return ((*at, key), found[0], f"the name of this field: {found[1]}")
            if isinstance(child, dict | list):
                stack.append((child, (*at, key)))
            elif found := _why_unusable(child):
                return ((*at, key), *found)
    return None


class JsonRequest(BaseModel):
    """A request body: refused whole (422) when it holds a number that is not finite or text that is not Unicode.

    The error's ``ctx["at"]`` says where in the body (its location is the body itself).
    """

    @model_validator(mode="before")
    @classmethod
    def _usable_values(cls, data: Any) -> Any:
        found = first_unusable(data)
        if found is not None:
            at, kind, why = found
            raise PydanticCustomError(kind, why, {"at": list(at)})
        return data


def _option_value(value: object) -> bool | int | float | str:
    """A strategy option's value: true or false, a (finite) number, or a text of at most MAX_OPTION_TEXT characters."""
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, str) and len(value) <= MAX_OPTION_TEXT:
        return value
    if isinstance(value, str):
        raise PydanticCustomError("string_too_long", "an option's text has at most {max_length} characters",
                                  {"max_length": MAX_OPTION_TEXT})
    raise PydanticCustomError("option_type", "an option is true or false, a finite number, or a text")


OptionName = Annotated[str, StringConstraints(min_length=1, max_length=100)]
"""A strategy option's name (GET /v1/strategies lists them; the longest is a few words)."""
OptionValue = Annotated[bool | int | float | str, PlainValidator(_option_value,
                                                                 json_schema_input_type=bool | int | float | str)]
"""A strategy option's value, one error when it is none of the kinds an option can be."""
