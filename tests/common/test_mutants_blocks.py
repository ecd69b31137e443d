"""``row_blocks``' default dtype: written for the mutation run's survivors in
``common.clustering.blocks`` (integer rows stacked as integers, the dtype read from a row not asked for)."""

from __future__ import annotations

import numpy as np

from common.clustering.blocks import row_blocks


def test_row_blocks_stack_integer_rows_as_float64_and_keep_a_floating_dtype():
    ((lo, block),) = list(row_blocks([np.array([1, 2]), np.array([3, 4])]))
    assert (lo, block.dtype) == (0, np.float64)
    np.testing.assert_array_equal(block, [[1.0, 2.0], [3.0, 4.0]])
    ((_, block32),) = list(row_blocks(np.ones((2, 3), dtype=np.float32)))
    assert block32.dtype == np.float32


def test_row_blocks_take_dtype_and_width_from_the_first_row_asked_for():
    ((lo, block),) = list(row_blocks([np.array([1.0, 2.0])]))
    assert lo == 0
    np.testing.assert_array_equal(block, [[1.0, 2.0]])
    rows = [np.ones(2, dtype=np.float64), np.ones(2, dtype=np.float32), np.ones(2, dtype=np.float64)]
    ((_, block),) = list(row_blocks(rows, [1, 2]))
    assert block.dtype == np.float32
