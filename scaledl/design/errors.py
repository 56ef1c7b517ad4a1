"""Errors raised by :mod:`scaledl.design`."""

from __future__ import annotations


class DesignError(ValueError):
    """An experimental design cannot be built or read; the message says why and names the input.

    Raised, for example, when there are fewer candidates than model terms, when the model matrix
    is singular (aliased terms), or when a design file is missing or corrupt.
    """


class PresetError(DesignError):
    """A preset YAML file is missing or invalid; the message names the file, field and value."""
