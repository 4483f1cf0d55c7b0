"""Plain decimal cells of a CSV chunk read with numpy word arithmetic, exactly as ``float``
reads them.

numpy's text readers convert one value at a time (``loadtxt``: ~0.5 us a float), which made a
robot's exports slow to load (2 files of 100k rows per episode, ten episodes: seconds). Most
cells of such a log are short decimals (``-0.0139681``, ``1700000000001000000``): each is
read here as up to three 8-byte words at once, checked to be ``[sign] digits [. digits]``,
and turned into its integer mantissa ``M`` and fraction length ``f`` with SWAR arithmetic
(eight digits per word in three multiplications). The value is ``M / 10**f``: one correctly
rounded division of two exact doubles while ``M <= 2**53`` and ``f <= 22`` (Clinger's fast
path), so the result is bit for bit what ``float(text)`` gives. A time column in ns is ``M``
itself (int64, 19 digits exact).

Anything else is not guessed at: a cell outside that form (an exponent, ``nan``, spaces, more
digits) is read with ``float`` (or the exact ns reader) by itself; a chunk whose rows do not
all have the header's field count, that holds a quote or a CR, or whose odd cells are many
(an ``%e`` export) is left to the caller's readers (None), which name the line at fault.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["parse_chunk"]

_U = np.uint64
_ONES = _U(0xFFFFFFFFFFFFFFFF)
_ZEROS = _U(0x3030303030303030)  # '0' in every byte
_POW10 = np.array([10 ** k for k in range(20)], dtype=np.uint64)
_FPOW10 = np.array([float(10 ** k) for k in range(23)])  # exact doubles
_EXACT = 2 ** 53  # mantissas a double holds exactly
_ODD_SHARE = 8  # more than 1 / 8 of a column's cells outside the form: the chunk's own reader


def _digits8(words: np.ndarray, count: np.ndarray) -> np.ndarray:
    """The number written by the first ``count`` (0..8) digit bytes of each word (digit values,
    first character in the low byte), eight digits per word in three steps."""
    shift = (8 - np.maximum(count, 1)).astype(_U) * _U(8)
    v = np.where(count > 0, np.left_shift(words, shift), _U(0))
    v = (v * _U(10) + (v >> _U(8))) & _U(0x00FF00FF00FF00FF)
    v = (v * _U(100) + (v >> _U(16))) & _U(0x0000FFFF0000FFFF)
    return (v * _U(10000) + (v >> _U(32))) & _U(0xFFFFFFFF)


def _byte_sum(flags: np.ndarray) -> np.ndarray:
    """The sum of the bytes of each word whose bytes are 0 or 1 (a horizontal add)."""
    return ((flags * _U(0x0101010101010101)) >> _U(56)).astype(np.int64)


def _zero_bytes(x: np.ndarray) -> np.ndarray:
    """0x80 in every byte of ``x`` that is zero, 0 elsewhere (exact, no borrow between bytes)."""
    low = _U(0x7F7F7F7F7F7F7F7F)
    return ~(((x & low) + low) | x | low)


def _cells(a: np.ndarray, padded: bytes, starts: np.ndarray, lengths: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per cell: mantissa M (uint64), fraction digits f, negative, has a dot, and whether it is
    of the plain form (``[+-] digits [. digits]``, 1..19 characters, at least one digit)."""
    n = starts.shape[0]
    view = np.ndarray((len(padded) - 7,), dtype="<u8", buffer=padded, strides=(1,))
    ok = (lengths >= 1) & (lengths <= 19)
    first = a[starts]  # (an empty cell's: its delimiter)
    negative = first == 0x2D
    signed = negative | (first == 0x2B)
    x = np.zeros(n, dtype=_U)
    dots = np.zeros(n, dtype=np.int64)
    dot_at = np.full(n, -1, dtype=np.int64)
    words = int(-(-int(lengths.max(initial=0)) // 8))
    counts = []
    parts = []
    for i in range(min(words, 3)):
        count = np.clip(lengths - 8 * i, 0, 8)
        word = view[starts + 8 * i]
        keep = np.where(count >= 8, _ONES,
                        np.left_shift(_U(1), (np.minimum(count, 7) * 8).astype(_U)) - _U(1))
        word = word & keep
        if i == 0:  # a leading sign reads as a leading zero
            word = np.where(signed, (word & ~_U(0xFF)) | _U(0x30), word)
        dot = _zero_bytes(word ^ _U(0x2E2E2E2E2E2E2E2E)) & keep
        found = _byte_sum(dot >> _U(7))
        dots += found
        lowest = dot & (~dot + _U(1))  # the first dot's 0x80 (bytes below it: 0xFF after -1)
        index = _byte_sum(((lowest - _U(1)) >> _U(7)) & _U(0x0101010101010101)) + 8 * i
        dot_at = np.where((found > 0) & (dot_at < 0), index, dot_at)
        word = word ^ ((dot >> _U(7)) * _U(0x1E))  # the dot reads as a zero: '.' ^ 0x1E == '0'
        check = word | (_ZEROS & ~keep)
        ok &= ((check & _U(0xF0F0F0F0F0F0F0F0))
               | (((check + _U(0x0606060606060606)) & _U(0xF0F0F0F0F0F0F0F0)) >> _U(4))
               ) == _U(0x3333333333333333)
        counts.append(count)
        parts.append(_digits8((word - (_ZEROS & keep)) & keep, count))
    ok &= dots <= 1
    ok &= lengths - signed - (dots > 0) >= 1  # at least one digit
    for i, part in enumerate(parts):
        tail = sum((counts[k] for k in range(i + 1, len(parts))), np.zeros(n, dtype=np.int64))
        x += part * _POW10.take(np.minimum(tail, 19))
    has_dot = dots > 0
    fraction = np.where(has_dot, lengths - 1 - dot_at, 0)
    scale = _POW10.take(np.clip(fraction, 0, 19))
    # the dot read as a zero digit: drop it
    mantissa = np.where(has_dot, (x // (scale * _U(10))) * scale + x % scale, x)
    return mantissa, fraction, negative, has_dot, ok


def parse_chunk(chunk: bytes, width: int, delimiter: str, wanted: Sequence[int],
                exact_ns: int | None, odd_float: Callable[[str], float],
                odd_ns: Callable[[str], int]) -> list[np.ndarray] | None:
    """The ``wanted`` columns (indices) of a chunk of whole rows (ending in a newline) as
    float64 arrays, the ``exact_ns`` column as int64; None: not a chunk for this reader (rows
    with another field count, quotes, CR, many odd cells, or an odd cell that ``odd_float`` /
    ``odd_ns`` refuse: the caller's readers name it)."""
    if not chunk.endswith(b"\n") or not chunk.isascii() or b'"' in chunk or b"\r" in chunk:
        return None
    a = np.frombuffer(chunk, dtype=np.uint8)
    separators = np.flatnonzero((a == 10) | (a == ord(delimiter)))
    rows = separators.shape[0] // width
    if rows * width != separators.shape[0] or rows == 0:
        return None
    ends = separators.reshape(rows, width)
    if not (a[ends[:, -1]] == 10).all():  # every row: width - 1 delimiters, then its newline
        return None
    padded = chunk + bytes(24)
    out: list[np.ndarray] = []
    for column in wanted:
        stop = np.ascontiguousarray(ends[:, column])
        if column:
            start = ends[:, column - 1] + 1
        else:
            start = np.empty(rows, dtype=np.int64)
            start[0] = 0
            start[1:] = ends[:-1, -1] + 1
        lengths = stop - start
        mantissa, fraction, negative, has_dot, ok = _cells(a, padded, start, lengths)
        if column == exact_ns:
            ok &= ~has_dot & (mantissa <= _U(2 ** 63 - 1))
            values: np.ndarray = mantissa.astype(np.int64)
            np.negative(values, out=values, where=negative)
        else:
            ok &= (mantissa <= _U(_EXACT)) & (fraction <= 22)
            values = mantissa.astype(np.float64) / _FPOW10.take(np.clip(fraction, 0, 22))
            np.negative(values, out=values, where=negative)
        odd = np.flatnonzero(~ok)
        if odd.shape[0] * _ODD_SHARE > rows:
            return None
        for k in odd.tolist():
            text = chunk[int(start[k]):int(stop[k])].decode("utf-8", "replace")
            try:
                values[k] = odd_ns(text) if column == exact_ns else odd_float(text)
            except ValueError:
                return None
        out.append(values)
    return out
