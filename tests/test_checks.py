"""The integer checks every layer shares, and "the whole database" as files spell it."""

import re

import numpy as np
import pytest

from lbhash.checks import non_negative_int, parse_int_list, positive_int, topk_from_file, topk_to_file
from lbhash.codes_file import load_codes_file, save_codes_file
from lbhash.data.protocols import Split, load_split, save_split
from lbhash.errors import InputError


@pytest.mark.parametrize("value", [1, 7, np.int64(3), np.uint8(200)])
def test_positive_integers_pass_as_python_ints(value):
    assert positive_int(value, "k") == int(value) and type(positive_int(value, "k")) is int


@pytest.mark.parametrize("value", [0, -2, 1.0, True, "3", None, np.float32(2)])
def test_anything_else_is_one_line_naming_the_option(value):
    with pytest.raises(InputError, match="^" + re.escape(f"nlist must be a positive integer, got {value!r}") + "$"):
        positive_int(value, "nlist")


def test_non_negative_accepts_zero_only_above_the_positive_rule():
    assert non_negative_int(0, "radius") == 0
    with pytest.raises(InputError, match=r"^radius must be a non-negative integer, got -1$"):
        non_negative_int(-1, "radius")


@pytest.mark.parametrize("stored, read", [("all", None), (np.array("all"), None), (-1, None), (np.int64(-1), None),
                                          (5, 5), (np.array(54000), 54000)])
def test_topk_as_files_hold_it(stored, read):
    assert topk_from_file(stored, "f.npz") == read


@pytest.mark.parametrize("bad", [0, -2, "everything", 2.5])
def test_a_bad_topk_in_a_file_names_the_file(bad):
    with pytest.raises(InputError, match=r"^f\.npz: 'topk' must be a positive integer or 'all'"):
        topk_from_file(bad, "f.npz")


def test_codes_and_split_files_write_all_for_the_whole_database(tmp_path):
    assert topk_to_file(None) == "all" and topk_to_file(np.int64(9)) == 9
    codes = np.zeros((2, 1), np.uint8)
    for topk in (None, 9):
        save_codes_file(tmp_path / "c.npz", codes, codes, [0, 1], [1, 0], topk=topk)
        with np.load(tmp_path / "c.npz", allow_pickle=False) as raw:
            assert raw["topk"].item() == ("all" if topk is None else 9)
        assert load_codes_file(tmp_path / "c.npz")["topk"] == topk
        split = Split(np.array([0]), np.array([1]), np.array([0, 2]), "given", 0, topk, 3)
        save_split(tmp_path / "s.npz", split)
        with np.load(tmp_path / "s.npz", allow_pickle=False) as raw:
            assert raw["topk"].item() == ("all" if topk is None else 9)
        assert load_split(tmp_path / "s.npz").topk == topk


def test_one_line_collapses_a_message_and_names_an_empty_one_by_its_type():
    from lbhash.errors import one_line

    assert one_line(ValueError("bad value\n   at row 3\tcolumn 2")) == "bad value at row 3 column 2"
    assert one_line(KeyError()) == "KeyError"


def test_one_parser_of_comma_separated_ids_for_the_command_line_and_the_service():
    assert parse_int_list("3, 1,,-2 ", "--ids") == [3, 1, -2]
    assert parse_int_list(" , ", "labels", allow_empty=True) == []
    with pytest.raises(InputError, match=r"^--ids must be comma-separated integers, got '1,x'$"):
        parse_int_list("1,x", "--ids")
    with pytest.raises(InputError, match=r"^labels must list at least one integer, got ''$"):
        parse_int_list("", "labels")
