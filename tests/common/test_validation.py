import math

import pytest

from common.validation import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    parse_float_list,
)


def test_check_int_accepts_and_converts_whole_floats():
    assert check_int(3, "n", "X", low=1) == 3
    assert check_int(3.0, "n", "X", low=1) == 3


@pytest.mark.parametrize("value", [0, -1, 2.5, "3", True, None])
def test_check_int_rejects_with_sklearn_wording(value):
    with pytest.raises(ValueError, match=r"The 'n' parameter of X must be an int >= 1\. Got .* instead\."):
        check_int(value, "n", "X", low=1)


def test_check_float_interval_ends():
    assert check_float(1.0, "f", "X", low=0.0, high=1.0, closed=(False, True)) == 1.0
    with pytest.raises(ValueError, match=r"must be a float in the range \(0.0, 1.0\]\. Got 0.0 instead"):
        check_float(0.0, "f", "X", low=0.0, high=1.0, closed=(False, True))
    with pytest.raises(ValueError, match="Got nan instead"):
        check_float(math.nan, "f", "X")


def test_check_choice_lists_every_option():
    assert check_choice("a", "s", "X", ["b", "a"]) == "a"
    with pytest.raises(ValueError, match=r"must be one of \{'a', 'b'\}\. Got 'c' instead"):
        check_choice("c", "s", "X", ["b", "a"])


def test_check_bool_is_strict():
    assert check_bool(False, "b", "X") is False
    with pytest.raises(ValueError, match="must be a bool"):
        check_bool(0, "b", "X")


def test_parse_float_list():
    assert parse_float_list("0, 90,180", "angles", "X") == (0.0, 90.0, 180.0)
    assert parse_float_list(15, "angles", "X") == (15.0,)
    with pytest.raises(ValueError, match="The 'angles' parameter of X must be a comma-separated list"):
        parse_float_list("0,ninety", "angles", "X")
