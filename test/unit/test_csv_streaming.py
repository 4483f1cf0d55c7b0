"""CSV logs are read with a typed parser, keeping only the mapped columns.

Every test runs twice: with pyarrow's reader (when installed) and with numpy's (pyarrow hidden,
as on a machine without the fast-csv extra). Chunks are made tiny here so that every row
layout crosses chunk boundaries; the values must equal what ``csv`` + ``float`` give, every
malformed row must be named by line (and column), and a child process reading a few
10^5-row log must stay within 3x the mapped data (plus one chunk's working set) above its
baseline.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from _csv_readers import csv_reader  # noqa: F401 (a fixture: both readers)
from fibril_calibration.recordings import csv_columns
from fibril_calibration.recordings.sources import CsvSource, SourceError

REPO = Path(__file__).resolve().parents[2]


def _write(path: Path, rows: int, *, seed: int = 3, end: str = "\n", last_newline: bool = True,
           header: str = "t_s,a,b,c,d") -> np.ndarray:
    rng = np.random.default_rng(seed)
    data = rng.normal(size=(rows, 5))
    data[:, 0] = np.arange(rows) * 1e-3
    lines = [header] + [",".join(repr(v) for v in row) for row in data.tolist()]
    path.write_bytes((end.join(lines) + (end if last_newline else "")).encode())
    return data


@pytest.fixture(autouse=True)
def both_readers(csv_reader: str) -> str:  # noqa: F811 (the fixture above)
    return csv_reader


@pytest.fixture()
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(csv_columns, "CHUNK_BYTES", 257)


@pytest.mark.parametrize("end, last", [("\n", True), ("\r\n", True), ("\n", False)])
def test_columns_equal_csv_and_float_across_chunks(tmp_path: Path, small_chunks: None,
                                                   end: str, last: bool) -> None:
    path = tmp_path / "log.csv"
    data = _write(path, 500, end=end, last_newline=last)
    source = CsvSource(path, "t_s", None)
    assert source.rows == 500
    np.testing.assert_array_equal(source.column("b"), data[:, 2])
    stream = source.stream(columns=["d", "a"])
    np.testing.assert_array_equal(stream.values, data[:, [4, 1]])
    np.testing.assert_array_equal(stream.times_ns, np.rint(data[:, 0] * 1e9).astype(np.int64))
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))[1:]
    np.testing.assert_array_equal(source.column("c"), [float(r[3]) for r in rows])


def test_only_the_columns_asked_for_are_held(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    _write(path, 100)
    source = CsvSource(path, "t_s", None)
    source.prefetch(["a", "not_a_column"])
    assert set(source._columns) == {"t_s", "a"}


def test_quoted_fields_and_exact_nanoseconds(tmp_path: Path, small_chunks: None) -> None:
    path = tmp_path / "log.csv"
    epoch = 1_700_000_000_123_456_789
    lines = ["time_ns,\"a\",b"] + [f"{epoch + 1_000_003 * n},\"{n * 0.5}\",{n}"
                                   for n in range(60)]
    lines[30] = f"{epoch + 1_000_003 * 29 + 7},1.5e0,2"  # another layout mid-file
    lines[31] = "1.700000000153456789e18,3,4"  # decimal exponent: rounded to the ns
    path.write_text("\n".join(lines) + "\n")
    source = CsvSource(path, "time_ns", None)
    times = source.times_ns
    assert times.dtype == np.int64 and times[0] == epoch and times[59] == epoch + 1_000_003 * 59
    assert times[29] == epoch + 1_000_003 * 29 + 7
    assert times[30] == 1_700_000_000_153_456_789
    assert source.column("a")[3] == 1.5 and source.column("a")[29] == 1.5


@pytest.mark.parametrize("row, text, needles", [
    (120, "0.12,1,2,3", ("line 122", "4 field(s), the header has 5")),
    (250, "", ("line 252", "0 field(s)")),
    (333, "0.333,1,x3,3,4", ("column 'b'", "line 335", "'x3' is not a number")),
    (400, "0.4,1,2,3,4,5", ("line 402", "6 field(s)")),
])
def test_malformed_rows_are_named_by_line_and_column(tmp_path: Path, small_chunks: None,
                                                     row: int, text: str,
                                                     needles: tuple[str, ...]) -> None:
    path = tmp_path / "log.csv"
    _write(path, 500)
    lines = path.read_text().split("\n")
    lines[row + 1] = text
    path.write_text("\n".join(lines))
    with pytest.raises(SourceError) as info:
        CsvSource(path, "t_s", None).stream(columns=["a", "b"])
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    for needle in needles:
        assert needle in message, message


def test_not_utf8_is_named_by_line(tmp_path: Path, small_chunks: None) -> None:
    path = tmp_path / "log.csv"
    _write(path, 100)
    blob = bytearray(path.read_bytes())
    at = blob.index(b"\n", 2000) + 3
    blob[at] = 0xFF
    path.write_bytes(bytes(blob))
    line = blob[:at].count(b"\n") + 1
    with pytest.raises(SourceError, match=f"line {line}: not UTF-8"):
        CsvSource(path, "t_s", None).column("a")


MEMORY_CHILD = textwrap.dedent("""
    import resource, sys
    if sys.argv[2] == "numpy":
        sys.modules["pyarrow"] = None  # hidden: the numpy path
    from pathlib import Path
    import numpy as np
    from fibril_calibration.recordings.sources import CsvSource
    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    base = peak()
    source = CsvSource(Path(sys.argv[1]), "t_s", None)
    stream = source.stream(columns=["a", "c"])
    mapped = stream.values.nbytes + stream.times_ns.nbytes
    print(peak() - base, mapped, len(stream))
""")


def test_memory_stays_within_three_times_the_mapped_data(tmp_path: Path, both_readers: str
                                                        ) -> None:
    """400 000 rows x 9 columns (~70 MB of text), two columns and the time mapped."""
    path = tmp_path / "big.csv"
    rows = 400_000
    rng = np.random.default_rng(0)
    with path.open("w") as out:
        out.write("t_s,a,b,c,d,e,f,g,h\n")
        for start in range(0, rows, 50_000):
            block = rng.normal(size=(50_000, 9))
            block[:, 0] = (np.arange(50_000) + start) * 1e-3
            np.savetxt(out, block, delimiter=",", fmt="%.17g")
    result = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(path), both_readers],
                            capture_output=True, text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0, result.stderr
    growth, mapped, count = (int(v) for v in result.stdout.split())
    assert count == rows
    # the mapped arrays (and the stream's stacked copy) plus one chunk's parse working set
    working_set = 48 * 2 ** 20
    assert growth <= 3 * mapped + working_set, (growth / 2 ** 20, mapped / 2 ** 20)


def test_a_long_and_a_short_row_that_balance_are_found(tmp_path: Path) -> None:
    """The comma count per chunk balances; the parse of the last column finds the short row,
    the exact reading names the first bad line."""
    path = tmp_path / "log.csv"
    _write(path, 300)
    lines = path.read_text().split("\n")
    lines[101] = "0.1,1,2,3,4,5"
    lines[102] = "0.101,1,2,3"
    path.write_text("\n".join(lines))
    with pytest.raises(SourceError, match=r"line 102: 6 field\(s\), the header has 5"):
        CsvSource(path, "t_s", None).column("a")


def test_a_text_column_beside_the_numbers(tmp_path: Path, both_readers: str) -> None:
    path = tmp_path / "log.csv"
    path.write_text("t_s,a,note\n" + "".join(f"{n * 0.001},{n},step {n}\n" for n in range(50)))
    source = CsvSource(path, "t_s", None)
    assert source._layout.simple if both_readers == "pyarrow" else source._layout.plain
    np.testing.assert_array_equal(source.column("a"), np.arange(50.0))
    with pytest.raises(SourceError, match=r"column 'note' line 2: 'step 0' is not a number"):
        source.column("note")
