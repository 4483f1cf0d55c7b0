"""The one YAML loader every document goes through (``_schema.load_yaml``): YAML 1.2 numbers,
libyaml speed with the pure-Python pipeline as an equivalent fallback, bounded cost (size,
nesting, alias expansion, recursive aliases) and one-line errors with file, line and column."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from fibril_sim_core import _schema as s
from fibril_sim_core.errors import FibrilError

LOADERS = [pytest.param(s._PyLoader, id="python")]
if yaml.__with_libyaml__:
    LOADERS.insert(0, pytest.param(s._CLoader, id="libyaml"))

BOMB = ('a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
        + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n"
                  for p, c in zip("abcdefgh", "bcdefghi")))


def load(text: str, loader: Any = None) -> Any:
    return s.load_yaml_text(text, "doc.yaml", FibrilError, loader=loader)


def error(text: str, loader: Any = None) -> str:
    with pytest.raises(FibrilError) as caught:
        load(text, loader)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("doc.yaml: "), message
    return message


@pytest.mark.parametrize("loader", LOADERS)
def test_numbers_read_as_yaml_1_2(loader: Any) -> None:
    doc = load("a: [1e-3, 1e0, 5E-2, -1e300, 1.5e3, 2.5, -.5, +1e2, 1E+2, 7, 0x10, 1_000, "
               "'1e-3', \"5E-2\", 1e, e3, 1e-3x, .inf, -.inf, .nan, 1e400]", loader)["a"]
    assert doc[:10] == [0.001, 1.0, 0.05, -1e300, 1500.0, 2.5, -0.5, 100.0, 100.0, 7]
    assert [type(v) for v in doc[:10]] == [float] * 9 + [int]
    assert doc[10:12] == [16, 1000]
    assert doc[12:17] == ["1e-3", "5E-2", "1e", "e3", "1e-3x"]  # quoted or not a number
    assert doc[17] == math.inf and doc[18] == -math.inf and math.isnan(doc[19])
    assert doc[20] == math.inf  # beyond the float range, as YAML 1.2 reads it


def test_global_pyyaml_is_left_as_it_is() -> None:
    assert yaml.safe_load("a: 1e-3") == {"a": "1e-3"}


@pytest.mark.parametrize("loader", LOADERS)
def test_loaders_agree_on_a_real_document(loader: Any) -> None:
    text = Path(__file__).parents[2].joinpath("config/examples/drivetrain/calibration.yaml"
                                              ).read_text()
    assert load(text, loader) == load(text)


def test_load_yaml_names_file_and_byte_of_non_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"a: 1\nb: caf\xe9\n")
    with pytest.raises(FibrilError, match=rf"^{path}: not valid UTF-8 at byte 11 \(line 2\)"):
        s.load_yaml(path, FibrilError)


def test_load_yaml_missing_directory_and_nul_names(tmp_path: Path) -> None:
    for path, expected in ((tmp_path / "none.yaml", "file not found"),
                           (tmp_path, "cannot read"), (Path("a\0b.yaml"), "not a usable")):
        with pytest.raises(FibrilError, match=expected):
            s.load_yaml(path, FibrilError)


def test_document_size_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s, "MAX_DOCUMENT_BYTES", 1024)
    path = tmp_path / "big.yaml"
    path.write_text("a: " + "x" * 2000)
    with pytest.raises(FibrilError, match=r"big.yaml: larger than 0 MiB; not read"):
        s.load_yaml(path, FibrilError)


@pytest.mark.parametrize("loader", LOADERS)
def test_errors_are_one_line_with_line_and_column(loader: Any) -> None:
    assert error("a: 1\nb: [1, 2\n", loader).startswith("doc.yaml: not valid YAML (line 3")
    assert "(line 1, column 5): mapping values are not allowed" in error("a: b: c", loader)
    assert "(line 2, column 4): unacceptable character #x0001" in error("a: 1\nb: \x01", loader)
    assert "expected a single document" in error("--- 1\n--- 2\n", loader)
    assert "(line 1, column 4): could not determine a constructor" in error(
        "a: !!python/object:os.system x", loader)


@pytest.mark.parametrize("loader", LOADERS)
def test_bad_scalars_are_yaml_errors_at_their_position(loader: Any) -> None:
    assert "(line 2, column 7): invalid timestamp '2001-13-40'" in error(
        "a: 1\ndate: 2001-13-40", loader)
    message = error("n: " + "1" * 5000, loader)
    assert "(line 1, column 4): invalid integer" in message and len(message) < 300


@pytest.mark.parametrize("loader", LOADERS)
def test_nesting_is_bounded(loader: Any) -> None:
    assert load("[" * 400 + "]" * 400, None) is not None
    for depth in (501, 5000, 200_000):
        message = error("a: " + "[" * depth + "]" * depth, loader)
        assert "nested deeper than 500 levels" in message or "maximum nesting" in message
    assert "nested deeper" in error("- " * 800 + "x", loader)


@pytest.mark.parametrize("loader", LOADERS)
def test_alias_bomb_fails_fast(loader: Any) -> None:
    assert len(BOMB.encode()) < 500
    started = time.perf_counter()
    message = error(BOMB + "model: *i\n", loader)
    assert time.perf_counter() - started < 1.0
    assert "more than 2,000,000 nodes once aliases are expanded" in message
    assert "(line " in message


@pytest.mark.parametrize("loader", LOADERS)
def test_deep_alias_and_recursive_alias_are_refused(loader: Any) -> None:
    deep = "x: &x " + "[" * 300 + "1" + "]" * 300 + "\ny: " + "[" * 300 + "*x" + "]" * 300
    assert "nested deeper than 500 levels" in error(deep, loader)
    assert "recursive alias" in error("a: &a [1, *a]", loader)
    assert "recursive alias" in error("a: &a {b: *a}", loader)


@pytest.mark.parametrize("loader", LOADERS)
def test_ordinary_aliases_and_merge_keys_still_work(loader: Any) -> None:
    doc = load("base: &b {kp: 1e1, kd: 2}\nleft: {<<: *b, kd: 3}\nright: *b\n", loader)
    assert doc == {"base": {"kp": 10.0, "kd": 2}, "left": {"kp": 10.0, "kd": 3},
                   "right": {"kp": 10.0, "kd": 2}}


def test_short_and_describe_stay_small_for_huge_values() -> None:
    huge = list(range(10**6))
    assert len(s.describe(huge)) < 100
    assert len(s.short("x" * 10**6)) <= 80
    assert s.short(10**5000) == f"an integer of {(10**5000).bit_length()} bits"
    nested: list[Any] = []
    for _ in range(10):
        nested = [nested, nested]  # shared: 2**10 leaves, still a bounded repr
    assert len(s.describe(nested)) < 100
    assert s.describe(None) == "nothing (null)" and s.describe("ab") == "str 'ab'"


def test_where_keys_and_messages_stay_one_line() -> None:
    where = s.Where("f.yaml").key("x" * 500).key("a\nb")
    assert len(where.path) < 130 and "\n" not in where.path
    assert "\n" not in str(where.fail("line one\nline two"))


def test_integers_and_numbers_are_bounded() -> None:
    where = s.Where("f.yaml", "n")
    with pytest.raises(FibrilError, match=r"f.yaml: n: expected an integer within"):
        s.integer(2**63, where)
    assert s.integer(2**63 - 1, where) == 2**63 - 1
    with pytest.raises(FibrilError, match=r"f.yaml: n: expected a finite number, got an int"):
        s.number(10**400, where)
    with pytest.raises(FibrilError, match=r"expected a finite number, got inf"):
        s.number(math.inf, where)


def test_existing_file_never_raises_os_errors(tmp_path: Path) -> None:
    where = s.Where("f.yaml", "model")
    for name in ("x" * 5000, "a\0b", "missing.xml"):
        with pytest.raises(FibrilError, match=r"^f.yaml: model: model file .* does not exist"):
            s.existing_file(tmp_path, name, where, "model file")
    (tmp_path / "m.xml").write_text("<mujoco/>")
    assert s.existing_file(tmp_path, "m.xml", where) == tmp_path / "m.xml"


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML without libyaml")
def test_libyaml_is_the_loader_and_faster(tmp_path: Path) -> None:
    assert s._Loader is s._CLoader
    text = "samples:\n" + "".join(f"  - {{time: {i * 0.002:.3f}, value: [{i}.5, 1e-3]}}\n"
                                  for i in range(1000))
    times: dict[str, float] = {"c": math.inf, "python": math.inf}
    for _ in range(3):  # interleaved, best of 3: one cold or interrupted run decides nothing
        for name, loader in (("c", s._CLoader), ("python", s._PyLoader)):
            started = time.perf_counter()
            doc = load(text, loader)
            times[name] = min(times[name], time.perf_counter() - started)
            assert doc["samples"][3] == {"time": 0.006, "value": [3.5, 0.001]}
    assert times["c"] < times["python"], times
