"""fibril_calibration: builds with colcon (ament_python) and with pip (pyproject.toml)."""

from setuptools import find_packages, setup

package_name = 'fibril_calibration'

setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(include=[package_name, f'{package_name}.*']),
    package_data={package_name: ['py.typed']},
    data_files=[
        ('share/ament_index/resource_index/packages', [f'resource/{package_name}']),
        (f'share/{package_name}', ['package.xml']),
    ],
    python_requires='>=3.11',  # mujoco 4 needs 3.11
    # Lowest supported versions (numpy, scipy: Ubuntu 24.04's; tested by `make test-distro`);
    # the exact versions of `make test` are pinned once, in the repository's requirements.txt.
    install_requires=['fibril_sim_core', 'numpy>=1.26.4', 'PyYAML>=6.0.1', 'scipy>=1.11.4',
                      'mujoco>=4.0.0', 'rosbags>=0.11.9', 'apsw>=3.54.1.0'],
    # `pip install fibril_...[report]`: --report draws its figures with matplotlib.
    # `[fast-csv]`: CSV logs parsed by pyarrow's reader (3-4x less CPU than numpy's, the same
    # values bit for bit; recordings/csv_arrow.py); without it numpy reads them.
    extras_require={'report': ['matplotlib>=3.6.3'], 'fast-csv': ['pyarrow>=26.0.1']},
    zip_safe=False,
    maintainer='Fibril Sim developers',
    maintainer_email='fibril-sim@example.com',
    description='Fibril Sim calibration engine and recording adapters (rosbag2 / MCAP / CSV)',
    license='Apache-2.0',
    entry_points={
        # `ros2 run fibril_calibration calibrate calibration.yaml` = `fibril_sim calibrate`.
        'console_scripts': ['calibrate = fibril_calibration.cli:main',
                            'recording_info = fibril_calibration.recording_cli:main'],
        # `fibril_sim calibrate`: the core CLI finds the command here, never by import.
        'fibril_sim.commands': ['calibrate = fibril_calibration.cli:register'],
    },
)
