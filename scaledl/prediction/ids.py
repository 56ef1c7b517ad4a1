"""Workload ids of many specs that differ from one workload only in a few integer fields.

``workload_id`` is the SHA-256 of the spec's sorted JSON
(:class:`~scaledl.workloads.spec.Workload`). Rows of one architecture that differ only in
``dataset_size`` (a scheduler's queue), or a planner's candidates that differ only in world
size, nodes, batch and dataset size, share everything else of that JSON text:
:class:`IdTemplate` cuts it once around those fields and hashes ``prefix + value + ...`` per
row, the same bytes ``workload_id`` hashes, without building and dumping a spec per row.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from scaledl.workloads.spec import Workload

_MARK = 7_919_000_000_000_000  # a number no spec field has; its JSON cuts the text


class IdTemplate:
    """The ids of ``workload`` with some integer fields replaced.

    Args:
        workload: the workload every other field comes from.
        fields: integer fields that vary (e.g. ``("dataset_size",)``).

    Raises:
        ValueError: a field is not an integer field of the spec.
    """

    def __init__(self, workload: Workload, fields: tuple[str, ...]) -> None:
        record = workload.spec_dict()  # what workload_id hashes (DDP: no layout fields)
        for i, name in enumerate(fields):
            if not isinstance(record.get(name), int):
                raise ValueError(f"IdTemplate: field {name!r} is not an integer field")
            record[name] = _MARK + i
        text = json.dumps(record, sort_keys=True)
        marks = sorted(fields, key=lambda f: text.index(f'"{f}": {_MARK + fields.index(f)}'))
        self._order = [fields.index(f) for f in marks]
        self._parts: list[str] = []
        rest = text
        for f in marks:
            head, _, rest = rest.partition(str(_MARK + fields.index(f)))
            self._parts.append(head)
        self._parts.append(rest)

    def ids(self, *columns: Iterable[int]) -> list[str]:
        """The ids, one per row of the given columns (in the order of ``fields``).

        Args:
            *columns: one sequence of integers per field, all of one length.

        Returns:
            16-hex-digit ids, as ``Workload.workload_id`` computes them.
        """
        parts, order = self._parts, self._order
        out = []
        for values in zip(*columns, strict=True):
            text = parts[0]
            for k, j in enumerate(order):
                text += str(int(values[j])) + parts[k + 1]
            out.append(hashlib.sha256(text.encode()).hexdigest()[:16])
        return out
