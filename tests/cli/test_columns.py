"""attribution/cli/columns.py: a column never runs into the next (#32: the job list's root cause ran into its
culprits)."""

from __future__ import annotations

from attribution.cli.columns import fit, table


def test_a_value_over_its_cap_is_cut_with_an_ellipsis_and_one_under_it_is_kept():
    assert fit("xid_45_after_nvlink_error 45 @dgx017", 20) == "xid_45_after_nvlink…"
    assert len(fit("xid_45_after_nvlink_error 45 @dgx017", 20)) == 20
    assert fit("nvlink_error", 20) == "nvlink_error"


def test_columns_are_as_wide_as_their_widest_value_up_to_the_cap_and_always_two_spaces_apart():
    rows = [["c1", "gpu_fallen_off_bus 79 @hx-gpu019", "hx-gpu019"],
            ["c1", "xid_45_after_nvlink_error 45 @a-node-with-a-very-long-name-indeed", "a,b,c"],
            ["c1", "-", "-"]]
    lines = table(["cluster", "root cause", "culprits"], rows, caps=(10, 40))
    assert lines[0] == "cluster  root cause                                culprits"
    at = lines[0].index("culprits")
    for line, row in zip(lines[1:], rows):
        assert line[at - 2:at] == "  " and line[at:] == row[2]
    assert lines[2] == "c1       xid_45_after_nvlink_error 45 @a-node-wi…  a,b,c"
    assert lines[1] == "c1       gpu_fallen_off_bus 79 @hx-gpu019          hx-gpu019"


def test_short_values_make_narrow_columns_and_the_last_column_is_never_cut():
    last = "n" * 300
    lines = table(["a", "b"], [["x", last]], caps=(30,))
    assert lines == ["a  b", f"x  {last}"]
