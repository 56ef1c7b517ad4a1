"""Shards of a design: which workloads one profiling job measures.

A design is split into ``n_shards`` shards by a stable rule: workload ``w`` belongs to shard
``int(sha256(w.workload_id)[:16], 16) % n_shards``. The shard of a workload depends on its id and
``n_shards`` only, so adding rows to a design (the retraining's augmentation) never moves the
existing ones, and every row is in exactly one shard. The Dagster pipeline (one partition per
shard, key ``K-of-N``) and ``scaledl profile --shard K-of-N`` use this one function.

Shards that run at once on several nodes profile into their own directory
(:func:`shard_dir`, ``<profiles>/shards/K-of-N``): one lock and one drift baseline per shard;
:mod:`scaledl.profiling.store` reads the parts of those directories with the main ones.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

#: Environment variable giving the number of shards of the pipeline's profiling.
SHARDS_ENV = "SCALEDL_PROFILING_SHARDS"
#: Shards when :data:`SHARDS_ENV` is unset.
DEFAULT_SHARDS = 4
#: Subdirectory of a profiles directory holding one directory per shard.
SHARDS_SUBDIR = "shards"

_KEY = re.compile(r"^(\d+)-of-(\d+)$")
_SPEC = re.compile(r"^\s*(\d+)\s*(?:-of-|/)\s*(\d+)\s*$")

T = TypeVar("T")


def shard_of(workload_id: str, n_shards: int) -> int:
    """The shard (``0 .. n_shards-1``) of a workload id.

    Raises:
        ValueError: ``n_shards`` is below 1 or ``workload_id`` is empty.
    """
    _check_count(n_shards, "n_shards")
    if not workload_id:
        raise ValueError("workload_id: empty; a shard needs the workload's id")
    digest = hashlib.sha256(workload_id.encode()).hexdigest()[:16]
    return int(digest, 16) % n_shards


def shard_workloads(workloads: Sequence[T], shard: int, n_shards: int) -> list[T]:
    """The workloads (objects with ``workload_id``) of shard ``shard`` of ``n_shards``, in order.

    Raises:
        ValueError: ``shard`` is not in ``0 .. n_shards-1``.
    """
    _check_shard(shard, n_shards)
    return [w for w in workloads if shard_of(w.workload_id, n_shards) == shard]


def shard_key(shard: int, n_shards: int) -> str:
    """The Dagster partition key of a shard: ``K-of-N`` (e.g. ``0-of-4``)."""
    _check_shard(shard, n_shards)
    return f"{shard}-of-{n_shards}"


def shard_keys(n_shards: int) -> list[str]:
    """Every shard's key, ``0-of-N`` .. ``N-1-of-N``."""
    _check_count(n_shards, "n_shards")
    return [shard_key(k, n_shards) for k in range(n_shards)]


def parse_shard_key(key: str) -> tuple[int, int]:
    """``(shard, n_shards)`` of a key ``K-of-N``.

    Raises:
        ValueError: the key is not ``K-of-N`` with ``0 <= K < N``, naming it.
    """
    match = _KEY.match(key)
    if not match:
        raise ValueError(f"shard key {key!r}: expected K-of-N, e.g. 0-of-4")
    shard, n_shards = int(match[1]), int(match[2])
    _check_shard(shard, n_shards, f"shard key {key!r}")
    return shard, n_shards


def parse_shard_spec(text: str) -> tuple[int, int]:
    """``(shard, n_shards)`` of the CLI's ``K-of-N``, the shard's key (shards numbered from 0).

    ``K/N``, the form of earlier releases, is read the same.

    Raises:
        ValueError: not ``K-of-N`` with ``0 <= K < N``, naming the value.
    """
    match = _SPEC.match(text)
    if not match:
        raise ValueError(f"--shard {text!r}: expected K-of-N with 0 <= K < N, e.g. 0-of-4")
    shard, n_shards = int(match[1]), int(match[2])
    _check_shard(shard, n_shards, f"--shard {text!r}")
    return shard, n_shards


def shard_count_from_env(environ: Mapping[str, str] | None = None) -> int:
    """The number of shards: ``$SCALEDL_PROFILING_SHARDS``, :data:`DEFAULT_SHARDS` when unset.

    Raises:
        ValueError: the variable is not a positive integer, naming it and its value.
    """
    value = (os.environ if environ is None else environ).get(SHARDS_ENV, "").strip()
    if not value:
        return DEFAULT_SHARDS
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"environment variable {SHARDS_ENV}={value!r}: expected an integer >= 1")
    return int(value)


def shard_dir(profiles_dir: Path, key: str) -> Path:
    """``<profiles_dir>/shards/<key>``: the own directory of a shard (key checked)."""
    parse_shard_key(key)
    return Path(profiles_dir) / SHARDS_SUBDIR / key


def _check_count(n_shards: int, name: str) -> None:
    if isinstance(n_shards, bool) or not isinstance(n_shards, int) or n_shards < 1:
        raise ValueError(f"{name}: {n_shards!r}; expected an integer >= 1")


def _check_shard(shard: int, n_shards: int, where: str = "shard") -> None:
    _check_count(n_shards, f"{where}: number of shards")
    if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < n_shards:
        raise ValueError(f"{where}: shard {shard!r} not in 0..{n_shards - 1}")
