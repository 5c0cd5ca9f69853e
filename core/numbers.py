"""Integers in query strings and other untrusted text: ASCII decimal digits only.

``str.isdigit()`` is true for ``"²"`` and other scripts' digits, and ``int()`` accepts ``" 5"``,
``"+5"``, ``"1_0"`` and Arabic-Indic ``"٣"``: a check with one and a conversion with the other
answered 500 for ``window=²``. Every number read from a query string goes through ``ascii_int``.
"""

from __future__ import annotations

import re

_DIGITS = re.compile(r"[0-9]+")


def ascii_int(text: object, max_digits: int = 18) -> int | None:
    """``text`` as a non-negative integer if it is 1 to ``max_digits`` ASCII digits ``0-9`` and
    nothing else (no sign, space, underscore or other digit); None otherwise."""
    if not isinstance(text, str) or not 0 < len(text) <= max_digits or not _DIGITS.fullmatch(text):
        return None
    return int(text)


__all__ = ["ascii_int"]
