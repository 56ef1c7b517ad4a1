"""The out-of-domain warnings of many rows are summarised, not printed per row (issue 28)."""

from scaledl.models.guard import summarise_outside

PRECISION = "precision=bf16: precision never trained on (trained on ['fp32'])"


def test_a_few_rows_are_listed_one_line_each():
    assert summarise_outside(["", PRECISION]) == [
        f"row 2: outside the training domain: {PRECISION}"
    ]
    assert summarise_outside(["", ""]) == []


def test_many_rows_print_counts_by_reason_and_the_first_rows():
    n = 100_000
    rows = [
        f"seq_len={16 + i}: above the training range [8, 16]" + (f"; {PRECISION}" if i % 2 else "")
        for i in range(n)
    ]
    lines = summarise_outside(rows)
    assert len(lines) == 1 + 2 + 1 + 5
    assert lines[0] == f"{n} of {n} rows outside the training domain, by reason:"
    assert lines[1] == f"  {n} rows: seq_len: above the training range [8, 16]"
    assert (
        lines[2] == f"  {n // 2} rows: precision: precision never trained on (trained on ['fp32'])"
    )
    assert lines[4].startswith("row 1: outside the training domain: seq_len=16:")
    assert lines[-1].startswith("row 5: ")
