"""fibril_sim_core: builds with colcon (ament_python) and with pip (pyproject.toml)."""

from setuptools import find_packages, setup

package_name = 'fibril_sim_core'

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
    # Lowest supported versions (numpy, PyYAML: Ubuntu 24.04's; tested by `make test-distro`);
    # the exact versions of `make test` are pinned once, in the repository's requirements.txt.
    install_requires=['numpy>=1.26.4', 'PyYAML>=6.0.1', 'mujoco>=4.0.0', 'rosbags>=0.11.9',
                      'zstandard>=0.23.0', 'pyzmq>=25.1.1', 'msgpack>=1.0.6'],
    # `pip install fibril_sim_core[report]`: --report draws its figures with matplotlib; the
    # dask execution backend (experiments and calibrations on a Dask cluster): the default
    # local backend never imports it.
    extras_require={'report': ['matplotlib>=3.6.3'],
                    'dask': ['dask[distributed]>=2026.8.0']},
    zip_safe=False,
    maintainer='Fibril Sim developers',
    maintainer_email='fibril-sim@example.com',
    description='Fibril Sim core: manifest, plan, instance, runtime, trace (pure Python, no rclpy)',
    license='Apache-2.0',
    entry_points={
        'console_scripts': [
            'fibril_sim = fibril_sim_core.cli:main',
        ],
    },
)
