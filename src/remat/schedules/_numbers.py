"""The one check of a whole-number argument, for every layer's options and arguments."""

from __future__ import annotations

from ._errors import InvalidRequest

__all__ = ["whole_number"]


def whole_number(value: object, *, what: str, field: str, least: int = 0) -> int:
    """``value`` when it is an int (not a bool) of at least ``least``; else InvalidRequest naming ``what``.

    >>> whole_number(3, what="Option 'rounds'", field="options")
    3
    >>> whole_number(1.5, what="Option 'seed'", field="options")
    Traceback (most recent call last):
    ...
    remat.schedules._errors.InvalidRequest: Option 'seed' must be a whole number >= 0, got 1.5.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InvalidRequest(f"{what} must be a whole number >= {least}, got {value!r}.", field=field)
    return value
