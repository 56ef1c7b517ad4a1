import hashlib

from scaledl.profiles.fingerprint import tables_sha256


def _expected(*files: tuple[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name, data in sorted(files):
        digest.update(name.encode())
        digest.update(hashlib.sha256(data).hexdigest().encode())
    return digest.hexdigest()


def test_the_digest_covers_parquet_names_and_bytes_in_name_order(tmp_path):
    (tmp_path / "runs.parquet").write_bytes(b"r" * 3)
    (tmp_path / "workloads.parquet").write_bytes(b"w")
    (tmp_path / "notes.txt").write_text("not a table")
    assert tables_sha256(tmp_path) == _expected(
        ("runs.parquet", b"rrr"), ("workloads.parquet", b"w")
    )
    (tmp_path / "runs.parquet").write_bytes(b"r" * 4)
    assert tables_sha256(tmp_path) == _expected(
        ("runs.parquet", b"rrrr"), ("workloads.parquet", b"w")
    )


def test_a_folder_without_tables_has_the_digest_of_nothing(tmp_path):
    assert tables_sha256(tmp_path) == hashlib.sha256().hexdigest()
