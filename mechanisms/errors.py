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


def bad_argument(message: str, key: str | None) -> ValueError:
    """A plain ``ValueError`` (its type unchanged: the SDK's contract, and the text of the test
    vectors' errors) that names the argument at fault for a caller mapping arguments to config
    keys (``argument_of``), so that no caller parses the message; ``key`` None: no one argument
    (the combination is wrong)."""
    exc = ValueError(message)
    vars(exc)["key"] = key
    return exc


def argument_of(exc: BaseException) -> str | None:
    """The argument a ``bad_argument`` error names (None for any other error, or none named)."""
    key = vars(exc).get("key")
    return key if isinstance(key, str) else None


class ImplausibleReport(InvalidReport):
    """A report whose number of set bits no honest device produces (poisoning defence)."""


__all__ = ["ImplausibleReport", "InvalidReport", "LdptelError", "argument_of", "bad_argument"]
