"""Run expectation suites on dataframes in a quiet, ephemeral Great Expectations context."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import great_expectations as gx
import numpy as np
import pandas as pd
from great_expectations.data_context.types.base import (
    DataContextConfig,
    InMemoryStoreBackendDefaults,
    ProgressBarsConfig,
)

from scaledl.validation.quarantine import RowFailure, format_value
from scaledl.validation.report import ExpectationOutcome


def gx_view(frame: pd.DataFrame) -> pd.DataFrame:
    """Return a copy of ``frame`` with dtypes GX 1.x understands; values are unchanged.

    GX's pandas type expectations do not recognise pandas' ``str`` (``StringDtype``) nor the
    nullable numeric extension dtypes. String columns become ``object`` (each value is then
    type-checked row by row) and nullable numerics become ``int64`` (no null) or ``float64``.

    Args:
        frame: the table.

    Returns:
        A shallow copy with converted columns.
    """
    view = frame.copy(deep=False)
    for name in view.columns:
        dtype = view[name].dtype
        if isinstance(dtype, pd.api.extensions.ExtensionDtype):
            if pd.api.types.is_string_dtype(dtype):
                view[name] = view[name].astype(object)
            elif pd.api.types.is_bool_dtype(dtype):
                view[name] = view[name].astype(object)
            elif pd.api.types.is_integer_dtype(dtype) and not view[name].isna().any():
                view[name] = view[name].astype("int64")
            elif pd.api.types.is_numeric_dtype(dtype):
                view[name] = view[name].to_numpy(dtype=float, na_value=np.nan)
    return view


@dataclass
class SuiteResult:
    """The parsed result of one suite on one table.

    Attributes:
        outcomes: one outcome per expectation.
        row_failures: ``(positions, failure-per-position)`` for each failed row-level
            expectation.
        errors: ``(column, expectation, detail)`` of expectations that failed at table level
            or raised.
    """

    outcomes: list[ExpectationOutcome] = field(default_factory=list)
    row_failures: list[tuple[int, RowFailure]] = field(default_factory=list)
    errors: list[tuple[str | None, str, str]] = field(default_factory=list)


class GxRunner:
    """An ephemeral GX context with progress bars off, validating in-memory dataframes."""

    def __init__(self) -> None:
        logging.getLogger("great_expectations").setLevel(logging.WARNING)
        quiet = ProgressBarsConfig(globally=False, metric_calculations=False)
        config = DataContextConfig(
            # no temporary Data Docs site: the report is our own HTML page
            store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
            analytics_enabled=False,
            progress_bars=quiet,
        )
        self._context = gx.get_context(mode="ephemeral", project_config=config)
        self._context.variables.progress_bars = quiet
        self._source = self._context.data_sources.add_pandas("scaledl_validation")
        self._assets = 0

    def run(self, table: str, frame: pd.DataFrame, suite: gx.ExpectationSuite) -> SuiteResult:
        """Validate a dataframe against a suite.

        Args:
            table: table name (for the outcomes).
            frame: the table with a ``RangeIndex``; row positions in the result refer to it.
            suite: expectations whose ``meta`` holds ``level`` and ``column``.

        Returns:
            The parsed :class:`SuiteResult`.
        """
        self._assets += 1
        asset = self._source.add_dataframe_asset(f"{table}_{self._assets}")
        batch = asset.add_batch_definition_whole_dataframe("whole").get_batch(
            batch_parameters={"dataframe": gx_view(frame)}
        )
        validation = batch.validate(suite, result_format={"result_format": "COMPLETE"})
        parsed = SuiteResult()
        for result in validation.results:
            self._parse(table, frame, result, parsed)
        return parsed

    @staticmethod
    def _parse(table: str, frame: pd.DataFrame, result, parsed: SuiteResult) -> None:
        """Turn one GX expectation result into an outcome and failures."""
        config = result.expectation_config
        level = config.meta.get("level", "row")
        column = config.meta.get("column") or None
        info = result.exception_info or {}
        raised = bool(info.get("raised_exception"))
        body = result.result or {}
        indices = [int(i) for i in body.get("unexpected_index_list") or []]
        success = bool(result.success) and not raised
        if raised:
            detail = f"expectation raised: {info.get('exception_message')}"
        elif config.type == "expect_column_to_exist":
            detail = "column not found"
        elif config.type == "expect_column_values_to_be_in_type_list" and column:
            detail = f"dtype {frame[column].dtype}, expected one of {config.kwargs['type_list']}"
        elif "observed_value" in body:
            detail = f"observed {body['observed_value']!r}"
        else:
            detail = f"{body.get('unexpected_count', 0)} unexpected value(s)"
        examples = [_cell(frame, column, i) for i in indices[:5]]
        if examples and not raised:
            detail += "; e.g. " + ", ".join(examples[:3])
        if not examples and not success and "observed_value" in body:
            examples = [format_value(body["observed_value"])]
        parsed.outcomes.append(
            ExpectationOutcome(
                table=table,
                level=level,
                expectation=config.type,
                column=column,
                success=success,
                element_count=int(body.get("element_count", len(frame)) or 0),
                unexpected_count=int(body.get("unexpected_count", 0 if success else 1) or 0),
                examples=examples,
            )
        )
        if success:
            return
        if level == "row" and not raised and indices:
            parsed.row_failures.extend(
                (i, RowFailure(config.type, column or "", _cell(frame, column, i))) for i in indices
            )
        else:
            parsed.errors.append((column, config.type, detail))


def _cell(frame: pd.DataFrame, column: str | None, position: int) -> str:
    """Return the offending value(s) of one row as a string (``a=1,b=2`` for compounds)."""
    if not column:
        return ""
    names = column.split(",")
    if len(names) == 1:
        return format_value(frame[names[0]].iloc[position])
    return ",".join(f"{n}={format_value(frame[n].iloc[position])}" for n in names)
