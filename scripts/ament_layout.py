"""Give the editable packages of a venv the ament layout that ``ros2 run`` / ``ros2 launch`` need.

pip's editable install (editable_mode=compat) installs neither a package's ``data_files``
(``share/ament_index/resource_index/packages/<pkg>``, ``share/<pkg>/package.xml``, launch files,
configurations) nor its console scripts under ``lib/<pkg>/``, where ``ros2 run`` looks. This
script lays them out in the venv prefix as symbolic links to the sources (like colcon's
``--symlink-install``: an edited launch file or configuration is live without a reinstall), from
each package's own ``setup.py`` (its ``data_files`` and ``console_scripts``), and writes a ``.pth``
that puts the venv prefix on ``AMENT_PREFIX_PATH`` for every Python started from the venv
(``ament_index_python`` finds packages only through that variable).

    python scripts/ament_layout.py PREFIX PACKAGE_DIR...

Links made by an earlier run and no longer wanted are removed (they are listed in
``PREFIX/.fibril-setup/ament-layout.txt``). Run by scripts/bootstrap.sh.
"""

from __future__ import annotations

import os
import runpy
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import setuptools

RECORD = Path('.fibril-setup') / 'ament-layout.txt'
PTH_NAME = 'fibril_ament_prefix.pth'
# One line: a .pth runs lines starting with "import". The venv prefix goes first on
# AMENT_PREFIX_PATH, once.
PTH_LINE = ("import os, sys; _p = [p for p in os.environ.get('AMENT_PREFIX_PATH', '')"
            ".split(os.pathsep) if p]; sys.prefix in _p or os.environ.__setitem__("
            "'AMENT_PREFIX_PATH', os.pathsep.join([sys.prefix, *_p]))\n")


class LayoutError(Exception):
    """A package's setup.py cannot be read, or a link cannot be made."""


@dataclass(frozen=True)
class Link:
    """``prefix/path`` -> ``target`` (absolute)."""

    path: Path
    target: Path


def setup_arguments(package_dir: Path) -> dict[str, Any]:
    """The keyword arguments ``package_dir/setup.py`` passes to ``setuptools.setup``."""
    captured: dict[str, Any] = {}
    original, cwd = setuptools.setup, os.getcwd()
    setuptools.setup = lambda **kwargs: captured.update(kwargs)  # type: ignore[assignment]
    try:
        os.chdir(package_dir)
        runpy.run_path(str(package_dir / 'setup.py'), run_name='__main__')
    except Exception as exc:  # noqa: BLE001 - any failure of a user's setup.py, named
        raise LayoutError(f'{package_dir / "setup.py"}: {type(exc).__name__}: {exc}') from exc
    finally:
        setuptools.setup = original  # type: ignore[assignment]
        os.chdir(cwd)
    if 'name' not in captured:
        raise LayoutError(f'{package_dir / "setup.py"}: setup() was not called with name=')
    return captured


def package_links(prefix: Path, package_dir: Path) -> list[Link]:
    """The data files and ``lib/<pkg>/`` executables of one package, as links."""
    arguments = setup_arguments(package_dir)
    name = arguments['name']
    links = []
    for destination, sources in arguments.get('data_files', []):
        for source in sources:
            target = (package_dir / source).resolve()
            if not target.is_file():
                raise LayoutError(f'{package_dir / "setup.py"}: data file {source} not found')
            links.append(Link(Path(destination) / Path(source).name, target))
    scripts = arguments.get('entry_points', {}).get('console_scripts', [])
    for script in scripts:
        executable = script.split('=', 1)[0].strip()
        target = prefix / 'bin' / executable
        if not target.is_file():
            raise LayoutError(f'{name}: console script {executable} is not installed in '
                              f'{prefix / "bin"} (install the package first)')
        links.append(Link(Path('lib') / name / executable, target))
    return links


def lay_out(prefix: Path, package_dirs: list[Path]) -> list[Link]:
    """Make every package's links (replacing what is there), remove the stale ones of an
    earlier run, write the AMENT_PREFIX_PATH .pth; returns the links."""
    links = [link for package_dir in package_dirs for link in package_links(prefix, package_dir)]
    record = prefix / RECORD
    wanted = {str(link.path) for link in links}
    if record.is_file():
        for line in record.read_text().splitlines():
            stale = prefix / line
            if line and line not in wanted and stale.is_symlink():
                stale.unlink()
    for link in links:
        path = prefix / link.path
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists():
            raise LayoutError(f'{path} exists and is not a file: cannot link it to {link.target}')
        path.symlink_to(link.target)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(''.join(f'{link.path}\n' for link in links))
    purelib = Path(sysconfig.get_path('purelib', vars={'base': str(prefix)}))
    (purelib / PTH_NAME).write_text(PTH_LINE)
    return links


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print('usage: ament_layout.py PREFIX PACKAGE_DIR...', file=sys.stderr)
        return 2
    prefix = Path(argv[0]).resolve()
    try:
        links = lay_out(prefix, [Path(p).resolve() for p in argv[1:]])
    except LayoutError as exc:
        print(f'error: ament layout: {exc}', file=sys.stderr)
        return 1
    print(f'{len(links)} links in {prefix}')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
