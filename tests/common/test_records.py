import math

import pytest
from flwr.app import ConfigRecord, MetricRecord, RecordDict

from common import keys
from common.records import read_bool, read_bytes, read_float, read_int, read_ints, read_str
from strategies.federation import _identity_of

WHERE = "the identity reply of node 7"


def test_each_reader_returns_its_type_from_a_flower_record():
    record = ConfigRecord({"i": 3, "f": 0.5, "s": "x", "b": b"\x00", "t": True, "l": [1, 2]})
    assert read_int(record, "i", WHERE) == 3
    assert read_float(record, "f", WHERE) == 0.5
    assert read_str(record, "s", WHERE) == "x"
    assert read_bytes(record, "b", WHERE) == b"\x00"
    assert read_bool(record, "t", WHERE) is True
    assert read_ints(record, "l", WHERE) == [1, 2]


def test_an_int_is_read_as_a_float_and_the_result_is_a_float():
    got = read_float(MetricRecord({"loss": 2}), "loss", WHERE)
    assert got == 2.0 and type(got) is float


@pytest.mark.parametrize(
    "reader, value, allowed",
    [
        (read_int, True, "an int"),  # bool is an int subclass
        (read_int, 3.0, "an int"),
        (read_int, "3", "an int"),
        (read_float, False, "a finite number"),
        (read_float, math.nan, "a finite number"),
        (read_float, math.inf, "a finite number"),
        (read_float, [1.0], "a finite number"),
        (read_str, b"x", "a str"),
        (read_bytes, "x", "bytes"),
        (read_bool, 1, "a bool"),
        (read_ints, [1, True], "a list of ints"),
        (read_ints, [1.0], "a list of ints"),
        (read_ints, 1, "a list of ints"),
    ],
)
def test_a_wrong_type_names_the_key_the_origin_and_the_value(reader, value, allowed):
    with pytest.raises(ValueError) as err:
        reader({"k": value}, "k", WHERE)
    assert str(err.value) == f"The 'k' value of {WHERE} must be {allowed}. Got {value!r} instead."


def test_a_missing_key_names_the_key_the_origin_and_what_is_there():
    with pytest.raises(
        ValueError, match=r"^The 'k' value of the identity reply of node 7 is missing \(it holds \['a'\]\)"
    ):
        read_int({"a": 1}, "k", WHERE)


def test_the_default_stands_in_for_an_absent_key_only():
    assert read_int({}, "k", WHERE, default=0) == 0
    assert read_bool({}, "k", WHERE, default=False) is False
    assert read_ints({}, "k", WHERE, default=[]) == []
    with pytest.raises(ValueError, match="must be an int"):
        read_int({"k": "5"}, "k", WHERE, default=0)


def _identity(**changes):
    values = {keys.PARTITION_ID: 4, keys.NUM_TRAIN: 3, keys.NUM_TEST: 1, keys.TRUE_GROUP: 0, keys.DEVICE: "cpu"}
    values.update(changes)
    return RecordDict({keys.IDENTITY: ConfigRecord({k: v for k, v in values.items() if v is not None})})


def test_an_identity_is_read_through_the_typed_readers():
    info = _identity_of(9, _identity(**{keys.CLASS_COUNTS: [1, 2], keys.NUM_VAL: 2}))
    assert (info.partition_id, info.node_id, info.num_train, info.num_val) == (4, 9, 3, 2)
    assert info.class_counts == (1, 2) and info.device == "cpu"


@pytest.mark.parametrize(
    "changes, text",
    [
        ({keys.NUM_TRAIN: 3.0}, "'num-train' value of the identity reply of node 9 must be an int. Got 3.0"),
        ({keys.PARTITION_ID: None}, "'partition-id' value of the identity reply of node 9 is missing"),
        ({keys.DEVICE: 1}, "'device' value of the identity reply of node 9 must be a str"),
        ({keys.CLASS_COUNTS: [1, 1]}, "must be ints >= 0 summing to 'num-train' (3). Got [1, 1]"),
        ({keys.NUM_VAL: -1}, "'num-val' value of the identity reply of node 9 must be an int >= 0. Got -1"),
        ({keys.PARTITION_ID: -1}, "must be >= 0, >= 1 and >= 0. Got -1, 3 and 1 instead."),
    ],
)
def test_a_malformed_identity_names_the_key_and_the_node(changes, text):
    with pytest.raises(ValueError) as err:
        _identity_of(9, _identity(**changes))
    assert text in str(err.value)
