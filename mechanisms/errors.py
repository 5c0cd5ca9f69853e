"""The root of every ldptel error, and the errors of the mechanisms floor.

``LdptelError`` is defined here, on the lowest floor that raises errors, so that the mechanisms
import nothing of ldptel but the wire schema; ``ldptel.errors`` re-exports it with the whole
tree in its docstring, and ``except ldptel.LdptelError`` catches every error ldptel raises on
purpose. Bad arguments to a mechanism raise plain ``ValueError`` naming the argument (the SDK's
contract since its first release); the classes here carry more than a message.
"""

from __future__ import annotations


class LdptelError(Exception):
    """Every error ldptel raises on purpose derives from this class (tree: ``ldptel.errors``)."""


class InvalidReport(LdptelError, ValueError):
    """A report that no honest device could have sent; ``index`` is its position in the batch
    (the lowest such position), ``reason`` says what is wrong with it."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"report {index}: {reason}")
        self.index = index
        self.reason = reason


class ImplausibleReport(InvalidReport):
    """A report whose number of set bits no honest device produces (poisoning defence)."""


__all__ = ["ImplausibleReport", "InvalidReport", "LdptelError"]
