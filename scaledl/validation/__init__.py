"""Validation of the design and the profiling tables (great-expectations suites + pandas rules).

Public API::

    from scaledl.validation import (
        validate_profiles, validate_design, ValidationConfig, ValidationReport, ValidationError,
    )
"""

from scaledl.validation.config import ValidationConfig
from scaledl.validation.errors import TableFailure, ValidationError
from scaledl.validation.pipeline import validate_design, validate_profiles
from scaledl.validation.report import ExpectationOutcome, Flag, TableSummary, ValidationReport

__all__ = [
    "ExpectationOutcome",
    "Flag",
    "TableFailure",
    "TableSummary",
    "ValidationConfig",
    "ValidationError",
    "ValidationReport",
    "validate_design",
    "validate_profiles",
]
