"""fibril_sim_ros: builds with colcon (ament_python) and with pip (pyproject.toml).

launch/ and config/ live at the repository root (beside this package, not in it) and are
installed into this package's share/ directory. Paths in data_files are relative to this
file's directory, which is where both colcon and pip run setup.py.

config/ and launch/ are installed through the symlinks fibril_sim_ros/config-files ->
../config and fibril_sim_ros/launch-files -> ../launch, so every source lies inside this
package: ``colcon build --symlink-install`` mirrors each data_files source to
build/fibril_sim_ros/<source>, and a ``../config/...`` source would land in build/config/,
outside the package's build folder (shared by every package of the workspace). The link names
are not Python identifiers on purpose: an editable install puts this folder on sys.path, and a
link named ``launch`` there was imported instead of ROS's ``launch`` package.
"""

from __future__ import annotations

import os
from glob import glob

from setuptools import Extension, find_packages, setup

package_name = 'fibril_sim_ros'
_here = os.path.dirname(os.path.abspath(__file__))


def _files(pattern: str) -> list[str]:
    """Files matching ``pattern`` (relative to this directory), sorted; empty if none."""
    return sorted(
        os.path.relpath(path, _here)
        for path in glob(os.path.join(_here, pattern), recursive=True)
        if os.path.isfile(path)
    )


def _tree(source: str, destination: str) -> list[tuple[str, list[str]]]:
    """data_files entries mirroring every file under ``source`` into ``destination``."""
    by_dir: dict[str, list[str]] = {}
    for path in _files(os.path.join(source, '**', '*')):
        subdir = os.path.dirname(os.path.relpath(path, source))
        by_dir.setdefault(os.path.join(destination, subdir).rstrip('/'), []).append(path)
    return sorted(by_dir.items())


data_files = [
    ('share/ament_index/resource_index/packages', [f'resource/{package_name}']),
    (f'share/{package_name}', ['package.xml']),
]
launch_files = _files(os.path.join('launch-files', '*.launch.py'))  # -> ../launch
if launch_files:
    data_files.append((f'share/{package_name}/launch', launch_files))
data_files += _tree('config-files', f'share/{package_name}/config')  # -> ../config

setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(include=[package_name, f'{package_name}.*']),
    package_data={package_name: ['py.typed']},
    # Batched GIL-free writes of serialized messages (fibril_sim_ros/rcl_publish.py). It needs
    # only Python's headers (no ROS ones); without a compiler the package installs without it
    # and writes message by message.
    ext_modules=[Extension(f'{package_name}._publish_batch',
                           [f'{package_name}/_publish_batch.c'], optional=True)],
    data_files=data_files,
    python_requires='>=3.11',
    # rclpy, launch, launch_ros and the message packages come from ROS (package.xml) or, in a
    # plain venv, from PyPI's ROS 2 wheels pinned in the repository's requirements.txt.
    install_requires=['fibril_sim_core', 'fibril_calibration', 'numpy>=1.26.4'],
    zip_safe=False,
    maintainer='Fibril Sim developers',
    maintainer_email='fibril-sim@example.com',
    description='Fibril Sim ROS 2 nodes: live simulation, SIL example controller, calibrate-on-bag',
    license='Apache-2.0',
    entry_points={
        'console_scripts': [
            'sim_node = fibril_sim_ros.sim_node:main',
            'sil_controller = fibril_sim_ros.examples.wheel_speed_controller:main',
        ],
    },
)
