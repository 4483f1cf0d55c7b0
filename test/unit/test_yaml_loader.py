"""The one YAML loader every document goes through (``schema.load_yaml``): the YAML 1.2 core
schema (numbers, booleans, no dates or base-60), duplicate keys refused, libyaml speed with the pure-Python pipeline as an equivalent fallback, bounded cost (size,
nesting, alias expansion, recursive aliases) and one-line errors with file, line and column."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from fibril_sim_core import schema as s
from fibril_sim_core.errors import FibrilError

REPO = Path(__file__).resolve().parents[2]

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


@pytest.mark.parametrize("loader", LOADERS)
def test_integers_booleans_and_dates_read_as_yaml_1_2(loader: Any) -> None:
    """Issue 23 item 9: YAML 1.1 read ``01024`` as octal 532, ``12:30:45`` as 45045, ``yes``
    and ``on`` as true and ``2001-12-14`` as a date."""
    doc = load("a: [01024, 007, 0o17, 0x1F, +12, -3, 1_024, 12:30:45, 1:30, 190:20:30.15, 0b11, "
               "-0o7, yes, no, on, off, y, n, Yes, ON, true, True, TRUE, false, False, FALSE, "
               "tRUE, 2001-12-14, 2001-12-14t21:59:43.10-05:00, ~, null, Null, NULL, nULL, =, "
               "1., .5, +.inf, .NaN, .Inf]", loader)["a"]
    assert doc[:7] == [1024, 7, 15, 31, 12, -3, 1024]
    assert all(type(v) is int for v in doc[:7])
    assert doc[7:12] == ["12:30:45", "1:30", "190:20:30.15", "0b11", "-0o7"]
    assert doc[12:20] == ["yes", "no", "on", "off", "y", "n", "Yes", "ON"]
    assert doc[20:27] == [True, True, True, False, False, False, "tRUE"]
    assert doc[27:29] == ["2001-12-14", "2001-12-14t21:59:43.10-05:00"]
    assert doc[29:35] == [None, None, None, None, "nULL", "="]
    assert doc[35:38] == [1.0, 0.5, math.inf] and math.isnan(doc[38]) and doc[39] == math.inf
    assert load("n:\nm: ''\n", loader) == {"n": None, "m": ""}
    assert load("!!timestamp 2001-12-14", loader).year == 2001  # asked for by name: still a date


@pytest.mark.parametrize("loader", LOADERS)
def test_duplicate_keys_are_errors_naming_both_lines(loader: Any) -> None:
    """Issue 23 item 9: an overlay with ``value: 0.02`` then ``value: 0.9`` loaded as 0.9."""
    message = error("parameters:\n  - id: damping\n    value: 0.02\n    unit: N m s\n"
                    "    value: 0.9\n", loader)
    assert message == ("doc.yaml: not valid YAML (line 5, column 5): duplicate key 'value' "
                       "(first at line 3, again at line 5)")
    assert "duplicate key 'y' (first at line 1 column 11, again at column 17)" in error(
        "a: {x: 1, y: 2, y: 3}", loader)
    # Keys equal once read are the same key, however they are written.
    assert "duplicate key 1 (first at line 1, again at line 2)" in error("1: a\n0x1: b", loader)
    assert "duplicate key None" in error("~: a\nnull: b", loader)
    assert "duplicate key 'k'" in error("base: &b {k: 1}\nx: {<<: *b, k: 2, k: 3}", loader)
    # A key a merge brings in is overridden by the mapping's own key, not a duplicate.
    assert load("base: &b {k: 1, j: 0}\nx: {<<: *b, k: 2}\ny: {<<: [*b, {k: 5}]}", loader
                ) == {"base": {"k": 1, "j": 0}, "x": {"k": 2, "j": 0}, "y": {"k": 1, "j": 0}}
    assert load("a: {k: 1}\nb: {k: 1}\nc: [{k: 1}, {k: 2}]", loader)["c"] == [{"k": 1},
                                                                                   {"k": 2}]


def test_documents_show_what_was_written_and_refuse_a_repeated_value(tmp_path: Path) -> None:
    """Through the real loaders: ``minor: 12:30:45`` was read as 45045 (``schema_version:
    1.45045`` in the error); an overlay's second ``value:`` silently replaced the first."""
    from fibril_sim_core.errors import ManifestError
    from fibril_sim_core.manifest import load_manifest
    from fibril_sim_core.overlays.artifact import OverlayError, load_overlay_artifact

    path = tmp_path / "simulation.yaml"
    path.write_text("schema_version: {major: 3, minor: 12:30:45}\nmodel: m.xml\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert str(caught.value) == (f"{path}: schema_version.minor: expected an integer, got str "
                                 f"'12:30:45'")
    overlay = tmp_path / "overlay.yaml"
    text = (REPO / "config/examples/drivetrain/damping-baseline.yaml").read_text()
    assert load_overlay_artifact_value(text, overlay) == 0.02
    lines = text.splitlines(keepends=True)
    at = next(n for n, line in enumerate(lines) if line.strip() == "value: 0.02")
    lines.insert(at + 1, "    value: 0.9\n")
    overlay.write_text("".join(lines))
    with pytest.raises(OverlayError) as caught:
        load_overlay_artifact(overlay)
    assert str(caught.value) == (f"{overlay}: not valid YAML (line {at + 2}, column 5): "
                                 f"duplicate key 'value' (first at line {at + 1}, again at "
                                 f"line {at + 2})")


def load_overlay_artifact_value(text: str, path: Path) -> float:
    from fibril_sim_core.overlays.artifact import load_overlay_artifact

    path.write_text(text)
    return load_overlay_artifact(path).parameters[0].value


EXAMPLES = sorted((REPO / "config" / "examples").rglob("*.yaml"))
#: Example documents that repeat a key (the fix is in the example, outside this test's files).
REPEATED_KEYS: dict[str, str] = {}  # example -> why it repeats a key (none does now)


@pytest.mark.parametrize("path", [
    pytest.param(path, marks=pytest.mark.xfail(strict=True, raises=FibrilError,
                                               reason=REPEATED_KEYS[name]))
    if (name := str(path.relative_to(REPO / "config" / "examples"))) in REPEATED_KEYS
    else path for path in EXAMPLES], ids=lambda p: str(p.relative_to(REPO / "config")))
def test_example_documents_read_the_same_as_yaml_1_1_and_repeat_no_key(path: Path) -> None:
    """The examples use nothing that YAML 1.1 and 1.2 read differently, and no key twice."""
    assert s.load_yaml(path, FibrilError) == yaml.safe_load(path.read_text(encoding="utf-8"))


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
        "a: 1\ndate: !!timestamp 2001-13-40", loader)
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
