"""Parse time of a ~1.4 MB calibration-like YAML request: PyYAML's pure-Python ``safe_load``
(the old loader) against ``fibril_sim_core.schema.load_yaml`` (libyaml + YAML 1.2 floats +
bounds) and bare ``yaml.CSafeLoader``. Run: ``python bench/yaml_loader.py`` (CPU seconds, best
of 3)."""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

import yaml

from fibril_sim_core import schema
from fibril_sim_core.errors import FibrilError


def request_text(episodes: int = 8, samples: int = 2800) -> str:
    """A calibration request with inline samples in block and flow style."""
    rng = random.Random(0)
    lines = ["schema_version: {major: 3, minor: 1}", "manifest: simulation.yaml",
             "parameters:", "  - {id: damping, lower: 0.0, upper: 0.1, initial: 2.0e-2,"
             " target: 'mujoco:joint_damping:wheel_joint:0'}",
             "observations:", "  - {id: wheel, selector: 'joint:wheel_joint.position'}",
             "training:"]
    for e in range(episodes):
        lines += [f"  - id: episode-{e}", f"    episode_seed: {e}", "    signals:",
                  "      wheel:", "        alignment: sample_and_hold",
                  "        residual_scale: 1.0e-2", "        samples:"]
        for i in range(samples):
            lines.append(f"          - {{time: {i * 0.002:.3f}, value: [{rng.gauss(0, 1):.9f},"
                         f" {rng.gauss(0, 1):.9f}]}}")
    return "\n".join(lines) + "\n"


def best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    text = request_text()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "request.yaml"
        path.write_text(text)
        old = best(lambda: yaml.safe_load(path.read_text()))
        new = best(lambda: schema.load_yaml(path, FibrilError))
        c_only = best(lambda: yaml.load(path.read_text(), Loader=yaml.CSafeLoader))
    print(f"document {len(text) / 1e6:.2f} MB")
    print(f"yaml.safe_load (old)      {old:.3f} s")
    print(f"schema.load_yaml (new)   {new:.3f} s  ({old / new:.1f}x faster)")
    print(f"yaml.CSafeLoader (bare)   {c_only:.3f} s  (libyaml without the bounds and 1.2 "
          f"floats, for reference)")


if __name__ == "__main__":
    main()
