"""The one safe reader: regular files only, bounded size and nesting, finite numbers."""

import os

import pytest

from scaledl.io.safe import (
    UnsafeInputError,
    check_regular_file,
    json_depth,
    parse_json,
    read_json,
    unique_keys,
)


def test_reads_a_plain_json_file(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('{"a": [1, 2.5, "x[{"], "b": {"c": null}}')
    assert read_json(path) == {"a": [1, 2.5, "x[{"], "b": {"c": None}}


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "labels.json"
    os.mkfifo(fifo)
    with pytest.raises(UnsafeInputError, match="labels.json: is a FIFO"):
        read_json(fifo)


def test_a_link_to_dev_zero_is_refused(tmp_path):
    link = tmp_path / "labels.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(UnsafeInputError, match="is a device"):
        read_json(link)


def test_a_directory_and_a_missing_file(tmp_path):
    with pytest.raises(UnsafeInputError, match="is a directory"):
        check_regular_file(tmp_path)
    with pytest.raises(FileNotFoundError):
        check_regular_file(tmp_path / "nowhere.json")


def test_a_file_over_the_size_limit_is_refused(tmp_path):
    path = tmp_path / "big.json"
    path.write_text("[" + "1," * 100 + "1]")
    with pytest.raises(UnsafeInputError, match="over the 50-byte limit"):
        read_json(path, max_bytes=50)


def test_deep_nesting_is_refused_before_parsing(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text("[" * 100_000 + "]" * 100_000)  # 200 KB: a RecursionError in json
    with pytest.raises(UnsafeInputError, match="manifest.json: JSON nested 100000 levels"):
        read_json(path)
    assert json_depth('{"a": "[[[[", "b": [[1]]}') == 3


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"x": -Infinity}', "[1e999]"])
def test_non_finite_numbers_are_refused(text):
    with pytest.raises(UnsafeInputError, match="where.json: not valid JSON"):
        parse_json(text, "where.json")


def test_a_non_finite_number_is_named_by_its_field():
    with pytest.raises(UnsafeInputError, match=r"l.json: .*field 'e2e_latency' \(value NaN\)"):
        parse_json('{"num_layer": 2, "e2e_latency": NaN}', "l.json")
    with pytest.raises(UnsafeInputError, match=r"field 'b'\[1\] \(value Infinity\)"):
        parse_json('{"a": {"b": [1, Infinity]}}', "l.json")


def test_not_utf8_and_not_json(tmp_path):
    path = tmp_path / "x.json"
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(UnsafeInputError, match="not UTF-8"):
        read_json(path)
    path.write_text("{oops")
    with pytest.raises(UnsafeInputError, match="x.json: not valid JSON"):
        read_json(path)


def test_unique_keys_refuses_a_key_given_twice_naming_it(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"a": 1, "b": {"c": 2, "c": 3}}')
    with pytest.raises(UnsafeInputError, match="config.json: .*key 'c' given twice"):
        read_json(path, object_pairs_hook=unique_keys)
    path.write_text('{"a": 1, "b": {"a": 2}}')
    assert read_json(path, object_pairs_hook=unique_keys) == {"a": 1, "b": {"a": 2}}
