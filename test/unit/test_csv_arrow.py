"""pyarrow's CSV reader (the optional fast path) gives what ``csv`` + ``float`` give, bit for bit.

Its values are compared with Python's ``float`` (``int`` for ns stamps) on the suite's example
logs and on random decimal strings (exponents, many digits, subnormals, -0.0, inf, nan); a
seeded fuzz of damaged logs gets the same values or the same error message from both readers
(every refusal of Arrow's goes to the numpy path, which names line and column), whatever
the delimiter, header row or BOM; and without
pyarrow (hidden) the numpy path reads every log alone.
"""

from __future__ import annotations

import csv
import math
import random
import struct
from contextlib import suppress
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _csv_readers import csv_reader, hide_pyarrow  # noqa: F401 (a fixture)
from fibril_calibration.recordings import csv_arrow
from fibril_calibration.recordings.csv_columns import CsvProblem, read_columns, read_layout
from fibril_calibration.recordings.sources import CsvSource, SourceError

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "config" / "examples").rglob("*.csv"))
SPECIAL = ["nan", "NaN", "-nan", "inf", "-inf", "+inf", "Infinity", "-Infinity", "-0.0", "0",
           "-0", "0.0", "4.9e-324", "5e-324", "2.4703282292062327e-324", "2.225073858507201e-308",
           "2.2250738585072014e-308", "1.7976931348623157e308", "1.7976931348623159e308",
           "1e400", "-1e400", "1e-400", " 1.5", "1.5 ", "\t-2.5", ".5", "5.", "+.5", "1E5",
           "1e+05", "0001.5", "1e0001", "9" * 400, "0." + "0" * 400 + "1",
           "9007199254740993", "0.1", "0.30000000000000004"]


@pytest.fixture(autouse=True)
def _arrow_for_small_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The logs here are small; pyarrow reads them anyway (``MIN_BYTES`` is a speed choice)."""
    monkeypatch.setattr(csv_arrow, "MIN_BYTES", 0)


def _bits(values: np.ndarray) -> np.ndarray:
    """float64 bit patterns, every NaN as one (a NaN is refused by the checks anyway)."""
    out = np.asarray(values, dtype=np.float64).copy()
    out[np.isnan(out)] = np.nan
    return out.view(np.int64)


def _random_decimal(r: random.Random) -> str:
    k = r.random()
    if k < 0.25:  # any double, in several formats
        x = struct.unpack("<d", r.getrandbits(64).to_bytes(8, "little"))[0]
        x = x if math.isfinite(x) else 1.0
        return r.choice([repr(x), f"{x:.25e}", f"{x:.17g}", f"{x:.40g}", f"{x:.12g}"])
    if k < 0.5:  # up to 40 digits, a point anywhere, an exponent
        digits = "".join(r.choice("0123456789") for _ in range(r.randint(1, 40)))
        p = r.randint(0, len(digits))
        text = digits[:p] + "." + digits[p:] if r.random() < 0.8 else digits
        if r.random() < 0.6:
            text += r.choice("eE") + r.choice(["", "+", "-"]) + str(r.randint(0, 340))
        return r.choice(["", "-", "+"]) + text
    if k < 0.65:  # subnormals and underflow
        return f"{r.choice(['', '-'])}{r.randint(1, 10 ** r.randint(1, 20))}e-{r.randint(300, 345)}"
    if k < 0.75:  # near and over the largest double
        return f"{r.randint(1, 10 ** r.randint(1, 20))}e{r.randint(280, 330)}"
    if k < 0.85:  # halfway between two doubles, written exactly
        x = struct.unpack("<d", r.getrandbits(64).to_bytes(8, "little"))[0]
        x = x if math.isfinite(x) and x != 0 else 1.5
        middle = (Decimal(x) + Decimal(math.nextafter(x, math.inf))) / 2
        return format(middle, "f") if 1e-30 < abs(x) < 1e30 else str(middle)
    return f"{r.gauss(0, 0.01):.{r.randint(1, 9)}g}"  # a sensor's reading


def _arrow_columns(path: Path, exact: set[str]) -> dict[str, np.ndarray]:
    layout = read_layout(path, f"recording {str(path)!r}")
    assert layout.simple
    names = list(layout.header)
    ns = next((n for n in names if n in exact), None)
    typed = csv_arrow.read_typed(layout.path, layout.data_start, len(names), layout.delimiter,
                                 {n: i for i, n in enumerate(names)}, ns, layout.rows)
    assert typed is not None, f"pyarrow refused {path}"
    assert read_columns(layout, names, exact_ns=ns).keys() == typed.keys()
    return typed


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(REPO)))
def test_example_logs_read_bit_for_bit(path: Path) -> None:
    pytest.importorskip("pyarrow.csv")
    typed = _arrow_columns(path, {"time_ns"})
    with path.open(newline="", encoding="utf-8-sig") as handle:
        rows = list(csv.reader(handle))
    for i, name in enumerate(rows[0]):
        cells = [r[i] for r in rows[1:]]
        if name == "time_ns":
            assert typed[name].dtype == np.int64
            assert typed[name].tolist() == [int(c) for c in cells]
        else:
            np.testing.assert_array_equal(_bits(typed[name]), _bits([float(c) for c in cells]))


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "streamed"])
def test_random_decimal_strings_read_as_float_reads_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, whole: bool) -> None:
    pytest.importorskip("pyarrow.csv")
    if not whole:
        monkeypatch.setattr(csv_arrow, "WHOLE_BYTES", 0)
        monkeypatch.setattr(csv_arrow, "BLOCK_BYTES", 64 << 10)
    r = random.Random(24)
    cells = SPECIAL + [_random_decimal(r) for _ in range(40_000)]
    stamps = [str(1_700_000_000_000_000_000 + r.randrange(10 ** 17)) for _ in cells]
    stamps[:3] = ["9223372036854775807", "-9223372036854775808", "1763146355421617551"]
    path = tmp_path / "values.csv"
    path.write_text("time_ns,x\n" + "".join(f"{t},{c}\n" for t, c in zip(stamps, cells)))
    typed = _arrow_columns(path, {"time_ns"})
    assert typed["time_ns"].tolist() == [int(t) for t in stamps]
    expected = np.array([float(c) for c in cells])
    np.testing.assert_array_equal(_bits(typed["x"]), _bits(expected))
    assert np.signbit(typed["x"][SPECIAL.index("-0.0")])


@pytest.mark.parametrize("cell, value", [("1_000", 1000.0), (" 1e3 ", 1000.0)])
def test_what_arrow_refuses_the_numpy_path_reads(tmp_path: Path, cell: str, value: float
                                                  ) -> None:
    """``float`` takes ``1_000``, Arrow does not; ``+5`` and ``1.7e18`` ns stamps likewise."""
    pytest.importorskip("pyarrow.csv")
    path = tmp_path / "log.csv"
    stamps = ["+1700000000000000000", "1.700000000001e18", "1700000000002000000"]
    path.write_text("time_ns,a\n" + "".join(f"{t},{cell}\n" for t in stamps))
    source = CsvSource(path, "time_ns", None)
    assert source._layout.simple
    assert source.times_ns.tolist() == [1_700_000_000_000_000_000 + k * 1_000_000
                                        for k in range(3)]
    assert source.column("a").tolist() == [value] * 3


def test_without_pyarrow_the_numpy_path_reads_alone(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    hide_pyarrow(monkeypatch)
    monkeypatch.setattr(csv_arrow, "read_typed", _never)
    path = tmp_path / "log.csv"
    path.write_text("time_ns,a\n" + "".join(f"{1_763_146_355_421_617_551 + n},{n / 3!r}\n"
                                            for n in range(100)))
    source = CsvSource(path, "time_ns", None)
    assert source._layout.plain and not source._layout.simple
    assert source.times_ns[-1] == 1_763_146_355_421_617_650
    assert source.column("a").tolist() == [n / 3 for n in range(100)]


def _never(*args: object, **kwargs: object) -> None:
    raise AssertionError("pyarrow's reader used while hidden")


# --------------------------------------------------------------------------- damaged logs

def _damaged(r: random.Random) -> tuple[bytes, dict[str, Any]]:
    """A small log with zero to two of the defects robots' exports and hand edits have, as
    exported (``,`` ``;`` or tab, a header row or none, a BOM or none), and the source's
    options that read it."""
    names = ["time_ns", "a", "b", "note"]
    lines = [",".join(names)]
    for n in range(30):
        lines.append(f"{1_700_000_000_000_000_000 + n * 1_000_000},{r.gauss(0, 1)!r},"
                     f"{r.gauss(0, 1e-3):.6g},step {n}")
    defects = [
        lambda k: f"{lines[k].rsplit(',', 1)[0]}",  # a short row
        lambda k: lines[k] + ",9",  # a long row
        lambda k: "",  # a blank line
        lambda k: lines[k].replace(",", ",x", 1),  # a bad cell
        lambda k: lines[k].replace(",", ",,", 1),  # an empty field more
        lambda k: lines[k].replace(",", ", ", 2),  # blanks around numbers
        lambda k: lines[k].split(",", 1)[0] + ",nan," + lines[k].split(",", 2)[2],
        lambda k: lines[k].split(",", 1)[0] + ",1e300," + lines[k].split(",", 2)[2],
        lambda k: lines[k].split(",", 1)[0] + ",," + lines[k].split(",", 2)[2],  # empty cell
        lambda k: lines[k].replace("step", '"step', 1) + '"',  # a quoted field
        lambda k: lines[k] + "\r",  # a CRLF row
        lambda k: lines[k].replace("step", "st\rep", 1),  # a lone CR
        lambda k: lines[k].replace("step", "st\u00e9p", 1),  # UTF-8, not ASCII
        lambda k: "1_700_000_000_000_000_000" + lines[k][19:],  # float/int take underscores
        lambda k: "+" + lines[k],  # a signed stamp
        lambda k: "99999999999999999999" + lines[k][19:],  # beyond int64
        lambda k: "1.7e18" + lines[k][19:],  # an exponent stamp (and time going back)
        lambda k: lines[k].replace("step", "st\x00ep", 1),  # a NUL in the text column
        lambda k: lines[k].replace(",", ",\x0b", 1),  # a vertical tab float() strips
    ]
    for _ in range(r.choice([0, 1, 1, 2])):
        k = r.randrange(1, len(lines))
        lines[k] = r.choice(defects)(k)
    headerless = r.random() < 0.2
    data = "\n".join(lines[headerless:]) + r.choice(["\n", "", "\n\n"])
    raw = data.replace(",", r.choice([",", ",", ";", "\t"])).encode()
    if r.random() < 0.05:
        at = r.randrange(len(lines[0]) + 1, len(raw))
        raw = raw[:at] + b"\xff" + raw[at + 1:]  # not UTF-8
    raw = (b"\xef\xbb\xbf" if r.random() < 0.2 else b"") + raw
    return raw, {"header": False, "columns": names} if headerless else {}


def _outcome(path: Path, columns: list[str], options: dict[str, Any]
             ) -> tuple[str, list[np.ndarray]]:
    try:
        source = CsvSource(path, "time_ns", None, **options)
        stream = source.stream(columns=columns)
        return "", [stream.times_ns, _bits(stream.values)]
    except SourceError as exc:
        return str(exc), []


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "streamed"])
def test_damaged_logs_get_the_same_values_or_error_from_both_readers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, whole: bool) -> None:
    """Parsed whole, and streamed in batches of a few rows (a large file's way)."""
    pytest.importorskip("pyarrow.csv")
    if not whole:
        monkeypatch.setattr(csv_arrow, "WHOLE_BYTES", 0)
        monkeypatch.setattr(csv_arrow, "BLOCK_BYTES", 512)
    r = random.Random(2024)
    used = 0
    for case in range(150):
        path = tmp_path / f"log{case}.csv"
        raw, options = _damaged(r)
        path.write_bytes(raw)
        columns = r.choice([["a"], ["a", "b"], ["b"]])
        fast = _outcome(path, columns, options)
        with suppress(CsvProblem):
            used += read_layout(path, "x", **options).simple
        with monkeypatch.context() as hidden:
            hide_pyarrow(hidden)
            slow = _outcome(path, columns, options)
        assert fast[0] == slow[0], (case, path.read_bytes()[:400])
        for ours, theirs in zip(fast[1], slow[1]):
            np.testing.assert_array_equal(ours, theirs)
    assert used > 100  # most logs took the pyarrow path


def test_both_readers_name_line_and_column(tmp_path: Path, csv_reader: str) -> None:  # noqa: F811
    path = tmp_path / "log.csv"
    rows = [f"{1_700_000_000_000_000_000 + n},{n},{n}" for n in range(40)]
    rows[20] = f"{1_700_000_000_000_000_020},2.146e9,nan"
    rows[25] = f"{1_700_000_000_000_000_025},x,1"
    path.write_text("time_ns,q,dq\n" + "\n".join(rows) + "\n")
    with pytest.raises(SourceError, match=r"column 'q' line 27: 'x' is not a number"):
        CsvSource(path, "time_ns", None).column("q")
    path.write_text("time_ns,q,dq\n" + "\n".join(rows[:25]) + "\n")
    with pytest.raises(SourceError, match=r"NaN or infinite values.*\(line 22\)"):
        CsvSource(path, "time_ns", None).stream(columns=["dq"])


def test_a_small_log_is_read_by_numpy_without_importing_pyarrow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Below ``MIN_BYTES`` the numpy path reads (the same values) and pyarrow is not loaded."""
    pytest.importorskip("pyarrow.csv")
    path = tmp_path / "log.csv"
    path.write_text("time_ns,a\n" + "".join(f"{1_763_146_355_421_617_551 + n},{n / 3!r}\n"
                                            for n in range(100)))
    arrow_read = CsvSource(path, "time_ns", None).column("a")
    monkeypatch.setattr(csv_arrow, "MIN_BYTES", path.stat().st_size + 1)
    monkeypatch.setattr(csv_arrow, "_load", _never)  # asking for pyarrow fails here
    source = CsvSource(path, "time_ns", None)
    assert source._layout.plain and not source._layout.simple
    np.testing.assert_array_equal(_bits(source.column("a")), _bits(arrow_read))
