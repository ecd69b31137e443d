"""``row_blocks``' default dtype: written for the mutation run's survivors in
``common.clustering.blocks`` (integer rows stacked as integers)."""

from __future__ import annotations

import numpy as np

from common.clustering.blocks import row_blocks


def test_row_blocks_stack_integer_rows_as_float64_and_keep_a_floating_dtype():
    ((lo, block),) = list(row_blocks([np.array([1, 2]), np.array([3, 4])]))
    assert (lo, block.dtype) == (0, np.float64)
    np.testing.assert_array_equal(block, [[1.0, 2.0], [3.0, 4.0]])
    ((_, block32),) = list(row_blocks(np.ones((2, 3), dtype=np.float32)))
    assert block32.dtype == np.float32
