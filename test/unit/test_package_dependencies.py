"""Every package declares what it imports, at the minimum version `make test-distro` tests.

A ROS 2 user installs the dependencies with `rosdep install --from-paths src --ignore-src -y`
(package.xml) and a pip user with `pip install ./fibril_...` (setup.py install_requires): a
module imported but not declared is missing for them. The declared minimum of a pip-world
dependency is the version the distro run installs (requirements.txt with
requirements-distro.txt's pins over it), the lowest one any test proves.
"""

from __future__ import annotations

import ast
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYTHON_PACKAGES = ("fibril_sim_core", "fibril_calibration", "fibril_sim_ros")

#: import name -> (rosdep key, PyPI name or None when it comes from ROS only).
THIRD_PARTY = {
    "numpy": ("python3-numpy", "numpy"),
    "scipy": ("python3-scipy", "scipy"),
    "yaml": ("python3-yaml", "PyYAML"),
    "mujoco": ("python3-mujoco-pip", "mujoco"),
    "rosbags": ("python3-rosbags-pip", "rosbags"),
    "apsw": ("python3-apsw", "apsw"),
    "zstandard": ("python3-zstandard", "zstandard"),
    "zmq": ("python3-zmq", "pyzmq"),
    "msgpack": ("python3-msgpack", "msgpack"),
    "fibril_sim_core": ("fibril_sim_core", "fibril_sim_core"),
    "fibril_calibration": ("fibril_calibration", "fibril_calibration"),
}
#: import name -> (package, extra, PyPI requirement): optional features a pip user installs with
#: ``pip install PACKAGE[EXTRA]`` (ROS users with pip: there is no rosdep key for them).
EXTRAS = {"distributed": ("fibril_sim_core", "dask", "dask[distributed]")}
#: Imported only where present, for an optional feature, and so not declared: lz4 reads the
#: lz4-compressed MCAP chunks of bags other tools wrote (Fibril writes zstd; rosbags brings lz4);
#: pytest is imported by fibril_sim_ros.testing_pytest, a plugin only pytest itself loads.
#: matplotlib draws the optional reports (--report): declared as the ``report`` extra of setup.py
#: and in package.xml (``optional_dependencies_are_declared`` below), imported lazily; PIL
#: (Pillow, a dependency of matplotlib) quantizes the reports' PNGs, imported with it.
OPTIONAL = {"lz4", "pytest", "matplotlib", "PIL"}
#: ROS packages whose Python module has the package's name (rosdep key = name), from ROS only.
ROS_MODULES = {
    "rclpy", "fibril_msgs", "std_msgs", "sensor_msgs", "geometry_msgs", "nav_msgs",
    "rosgraph_msgs", "std_srvs", "builtin_interfaces", "rcl_interfaces", "launch", "launch_ros",
    "ament_index_python", "rosidl_runtime_py", "rosbag2_py", "launch_testing",
    "tf2_msgs", "visualization_msgs", "simulation_interfaces", "action_msgs",
}


def imported_modules(package: str) -> set[str]:
    """Top-level names of every absolute import in the package's sources (lazy ones too)."""
    names: set[str] = set()
    for source in sorted((REPO / package / package).rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != package}


def exec_depends(package: str) -> dict[str, str | None]:
    root = ET.parse(REPO / package / "package.xml").getroot()
    return {e.text.strip(): e.get("version_gte")
            for e in root if e.tag in ("exec_depend", "depend") and e.text}


def install_requires(package: str) -> dict[str, str | None]:
    """``name -> minimum`` from setup.py's install_requires list."""
    match = re.search(r"install_requires=\[([^\]]*)\]", (REPO / package / "setup.py").read_text())
    assert match, f"{package}/setup.py: no install_requires list"
    out: dict[str, str | None] = {}
    for item in re.findall(r"'([^']+)'", match.group(1)):
        name, _, minimum = item.partition(">=")
        out[name.strip()] = minimum.strip() or None
    return out


def distro_versions() -> dict[str, str]:
    """Pins of the distro run: requirements.txt, then requirements-distro.txt over it."""
    pins: dict[str, str] = {}
    for name in ("requirements.txt", "requirements-distro.txt"):
        for line in (REPO / name).read_text().splitlines():
            line = line.split("#")[0].strip()
            if "==" in line:
                package, version = line.split("==")
                pins[re.sub(r"[-_.]+", "-", package.strip().lower())] = version.strip()
    return pins


@pytest.mark.parametrize("package", PYTHON_PACKAGES)
def test_every_import_is_declared(package: str) -> None:
    declared = exec_depends(package)
    requires = install_requires(package)
    pins = distro_versions()
    for module in sorted(imported_modules(package) - OPTIONAL):
        if module in EXTRAS:
            owner, extra, requirement = EXTRAS[module]
            tested = pins[re.sub(r"[-_.]+", "-", requirement.split("[")[0])]
            assert package == owner, f"{package} imports {module}: only {owner} may"
            assert f"'{extra}': ['{requirement}>={tested}']" in (
                REPO / package / "setup.py").read_text(), (
                f"{package}/setup.py: extras_require {{'{extra}': ['{requirement}>={tested}']}}")
            continue
        if module in ROS_MODULES:
            assert module in declared, f"{package} imports {module}: add <exec_depend>{module}"
            continue
        assert module in THIRD_PARTY, (
            f"{package} imports {module}: map it to its rosdep key in this test and declare it")
        key, pypi = THIRD_PARTY[module]
        assert key in declared, f"{package} imports {module}: add <exec_depend>{key} to package.xml"
        assert pypi in requires, f"{package} imports {module}: add {pypi!r} to install_requires"
        if module.startswith("fibril_"):
            continue
        tested = pins[re.sub(r"[-_.]+", "-", pypi.lower())]
        assert requires[pypi] == tested, f"{package}/setup.py: {pypi}>={tested} (tested minimum)"
        assert declared[key] == tested, (
            f'{package}/package.xml: <exec_depend version_gte="{tested}">{key} (tested minimum)')


@pytest.mark.parametrize("package", PYTHON_PACKAGES)
def test_nothing_declared_that_is_not_imported(package: str) -> None:
    """A stale library dependency makes every user install something never used (fibril_*
    packages may be needed without an import: launch files run their executables)."""
    imported = imported_modules(package)
    keys = {THIRD_PARTY[m][0] for m in imported if m in THIRD_PARTY}
    pip_world = {key for module, (key, _) in THIRD_PARTY.items() if not module.startswith("fibril_")}
    stale = {key for key in exec_depends(package) if key in pip_world and key not in keys}
    assert not stale, f"{package}/package.xml declares {sorted(stale)} but never imports them"


def test_distro_versions_are_ubuntu_24_04s() -> None:
    pins = distro_versions()
    assert (pins["numpy"], pins["scipy"], pins["pyyaml"]) == ("1.26.4", "1.11.4", "6.0.1")


@pytest.mark.parametrize("package", ("fibril_sim_core", "fibril_calibration"))
def test_optional_dependencies_are_declared(package: str) -> None:
    """matplotlib (reports, drawn through fibril_sim_core.reporting): rosdep installs it, pip
    installs it with ``[report]``, at the version the distro run tests."""
    assert "matplotlib" in imported_modules("fibril_sim_core")
    tested = distro_versions()["matplotlib"]
    assert exec_depends(package).get("python3-matplotlib") == tested
    setup = (REPO / package / "setup.py").read_text()
    assert "extras_require=" in setup and f"'report': ['matplotlib>={tested}']" in setup
