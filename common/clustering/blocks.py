"""Clients' vectors read a block of rows at a time into one reused buffer.

A server holds one array per client (a reply's update); the steps that read all of them (FL+HC's
assignment, Sattler's norms and halves, FLIC's store) stack ``chunk`` rows at a time. A fresh
``np.stack`` of 512 DNN updates allocates 325 MB that the kernel maps page by page: about 1 ms of
CPU per update at 100,000 clients, ten times the copy itself. :func:`row_blocks` copies every block
into the same buffer (``np.stack(..., out=)``), so the pages are mapped once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

CHUNK = 512
"""Rows per block (512 DNN updates of 159,010 float32: 325 MB)."""


def row_blocks(
    rows: Sequence[np.ndarray] | np.ndarray,
    positions: Sequence[int] | np.ndarray | None = None,
    *,
    chunk: int = CHUNK,
    dtype: type | np.dtype | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """``(lo, block)``: the rows at ``positions[lo : lo + chunk]`` stacked, ``chunk`` at a time.

    Parameters
    ----------
    rows : sequence of N arrays (d,), or ndarray (N, d)
    positions : sequence of int, optional
        Which rows, in this order (default: all).
    chunk : int, default=512
    dtype : numpy dtype, optional
        The blocks' dtype (default: the first row's floating dtype, else float64).

    Yields
    ------
    lo : int
        The block's first index into ``positions``.
    block : ndarray of shape (min(chunk, len - lo), d)
        A view of a buffer that the next block overwrites: use it (or copy it) before asking for
        the next.
    """
    at = np.arange(len(rows)) if positions is None else np.asarray(positions, dtype=np.int64)
    if not len(at):
        return
    first = np.asarray(rows[int(at[0])])
    if dtype is None:
        dtype = first.dtype if np.issubdtype(first.dtype, np.floating) else np.float64
    buffer = np.empty((min(chunk, len(at)), first.shape[-1]), dtype=dtype)
    for lo in range(0, len(at), chunk):
        part = at[lo : lo + chunk]
        block = buffer[: len(part)]
        if isinstance(rows, np.ndarray):
            if rows.dtype == block.dtype:
                np.take(rows, part, axis=0, out=block)
            else:
                block[...] = rows[part]
        else:
            np.stack([np.asarray(rows[int(i)]) for i in part], out=block, casting="same_kind")
        yield lo, block
