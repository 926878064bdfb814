"""The options a strategy reads, each declared once with the values it accepts.

A strategy's ``options`` map each name to an :class:`Option`: what it does and what it accepts (true or
false, a whole number in a range, or one of a few names). :meth:`remat.solvers.Strategy.check_options`
checks a request's options against them, so the service refuses a bad value at admission (422, no job) and
:func:`remat.solvers.solve` before anything runs; strategies then read values already checked.

>>> Option.whole("roundings to try", most=10).problem(11)
'a whole number from 0 to 10'
>>> Option.choice("a path", ("anneal", "milp")).problem("bogus")
"one of 'anneal', 'milp'"
>>> Option.flag("warm start").problem(True) is None
True
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

__all__ = ["SHOWN_CHARS", "Option", "OptionKind", "shown_value"]

SHOWN_CHARS = 100
"""Most characters of a refused value an error repeats (a request's value is never echoed whole)."""


class OptionKind(StrEnum):
    """The kind of value an option takes."""

    FLAG = "flag"
    """true or false."""
    WHOLE = "whole"
    """A whole number (not a boolean) between ``least`` and ``most``."""
    CHOICE = "choice"
    """One of the names in ``choices``."""


@dataclass(frozen=True)
class Option:
    """One option of a strategy: what it does (``summary``) and the values it accepts (``kind`` and its bounds)."""

    summary: str
    kind: OptionKind
    least: int = 0
    most: int | None = None
    choices: tuple[str, ...] = ()

    @classmethod
    def flag(cls, summary: str) -> Option:
        """An option that is true or false."""
        return cls(summary, OptionKind.FLAG)

    @classmethod
    def whole(cls, summary: str, *, least: int = 0, most: int | None = None) -> Option:
        """An option that is a whole number from ``least`` to ``most`` (no upper bound when None)."""
        return cls(summary, OptionKind.WHOLE, least=least, most=most)

    @classmethod
    def choice(cls, summary: str, choices: tuple[str, ...]) -> Option:
        """An option that is one of ``choices``."""
        return cls(summary, OptionKind.CHOICE, choices=choices)

    @property
    def accepts(self) -> str:
        """What the option accepts, as a phrase for errors and listings."""
        if self.kind is OptionKind.FLAG:
            return "true or false"
        if self.kind is OptionKind.CHOICE:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.most is None:
            return f"a whole number >= {self.least}"
        return f"a whole number from {self.least} to {self.most}"

    def problem(self, value: object) -> str | None:
        """None when ``value`` is one this option accepts; else what it accepts (:attr:`accepts`)."""
        if self.kind is OptionKind.FLAG:
            ok = isinstance(value, bool)
        elif self.kind is OptionKind.CHOICE:
            ok = isinstance(value, str) and value in self.choices
        else:
            ok = (isinstance(value, int) and not isinstance(value, bool) and value >= self.least
                  and (self.most is None or value <= self.most))
        return None if ok else self.accepts

    def with_summary(self, summary: str) -> Option:
        """The same values accepted, described by ``summary``."""
        return replace(self, summary=summary)


def shown_value(value: object, limit: int = SHOWN_CHARS) -> str:
    """``value`` as an error may repeat it: its repr, lone surrogates escaped, cut to ``limit`` characters.

    >>> shown_value("x" * 500)[-20:]
    '... (502 characters)'
    """
    text = repr(value).encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
