"""Bounded excerpts of offending values, so an error message never echoes a 50 MB field."""

from __future__ import annotations

import reprlib
from typing import Any

#: Longest message the command line prints (characters); the middle of a longer one is cut.
MAX_MESSAGE_CHARS = 2000


def excerpt(value: Any, limit: int = 80) -> str:
    """A bounded ``repr`` of a value for an error message.

    ``reprlib`` cuts long strings, lists and nested containers with ``...``.

    Args:
        value: the offending value.
        limit: about the most characters of a string or other value shown.

    Returns:
        The excerpt.
    """
    shorten = reprlib.Repr()  # Python 3.11's constructor takes no limits
    shorten.maxstring = shorten.maxother = limit
    shorten.maxlist = shorten.maxdict = 8
    shorten.maxlevel = 3
    return shorten.repr(value)


def bounded(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``message``, or its start and end around a note of how many characters were left out.

    Args:
        message: an error message.
        limit: the most characters kept (start and end halves).

    Returns:
        The message, at most about ``limit`` characters long.
    """
    if len(message) <= limit:
        return message
    half = limit // 2
    return (
        f"{message[:half]} ...[{len(message) - 2 * half} characters left out]... {message[-half:]}"
    )
