"""Milliseconds per calibration candidate plan on a mesh model: compile once vs compile each.

The Menagerie Panda (67 meshes) with a motor on each of its seven arm actuators, 21 joint
parameters (damping, armature, frictionloss) and seven link masses; each candidate scales every
value a little. Three ways, interleaved, median over the candidates after the first two:

* ``compile``: every candidate compiled (the written path switched off);
* ``written``: values written into a copy of the compiled model (a caller that never releases
  its plans, e.g. one keeping every candidate);
* ``written + release``: the calibration's way: finished candidates are released and their
  models reused.

Usage: ``python bench/candidate_build.py [--model PATH] [--candidates 30]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from fibril_sim_core import ParameterOverlays, SimulationBuilder
from fibril_sim_core.manifest import load_manifest
from fibril_sim_core.overlays import MujocoTarget, OverlayParameter
from fibril_sim_core.overlays import compiled as compiled_overlays

PANDA = Path("/work/shared/models/franka_emika_panda/panda.xml")


def run(manifest: Any, overlays: ParameterOverlays, count: int, *, written: bool,
        release: bool) -> list[float]:
    writable = compiled_overlays.writable
    if not written:
        compiled_overlays.writable = lambda *args: False  # type: ignore[assignment]
    try:
        builder = SimulationBuilder()
        seconds = []
        for k in range(count):
            values = {p.id: p.value * (1.0 + 0.01 * k) for p in overlays.parameters}
            started = time.perf_counter()
            plan = builder.build(manifest, overlays.with_values(values))
            seconds.append(time.perf_counter() - started)
            if release:
                builder.release(plan)
            del plan
        return seconds[2:]
    finally:
        compiled_overlays.writable = writable  # type: ignore[assignment]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=PANDA)
    parser.add_argument("--candidates", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fibril-bench-build-") as folder:
        path = Path(folder) / "panda.yaml"
        path.write_text(yaml.safe_dump({
            "schema_version": {"major": 3, "minor": 1}, "model": str(args.model.resolve()),
            "components": [{"id": f"m{i}", "type": "fibril_sim/motor", "endpoint": f"m{i}",
                            "bind": {"actuator": f"actuator{i}"}} for i in range(1, 8)]}))
        manifest = load_manifest(path)
        parameters = [OverlayParameter(f"{kind}{i}", 0.1, (MujocoTarget(kind, f"joint{i}"),))
                      for kind in ("joint_damping", "joint_armature", "joint_frictionloss")
                      for i in range(1, 8)]
        parameters += [OverlayParameter(f"mass{i}", 1.0, (MujocoTarget("body_mass", f"link{i}"),))
                       for i in range(1, 8)]
        overlays = ParameterOverlays(tuple(parameters))
        ways = {"compile": (False, False), "written": (True, False),
                "written + release": (True, True)}
        results: dict[str, list[float]] = {way: [] for way in ways}
        for repeat in range(3):
            for way in (list(ways) if repeat % 2 == 0 else list(ways)[::-1]):
                written, release = ways[way]
                results[way] += run(manifest, overlays, args.candidates, written=written,
                                    release=release)
        print(f"{args.model.name}: {len(parameters)} parameters, {args.candidates} candidates "
              f"x 3 interleaved runs, median ms per candidate plan")
        for way, seconds in results.items():
            print(f"  {way:<20} {statistics.median(seconds) * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()
