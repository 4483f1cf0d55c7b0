"""The quadruped-leg example (issue 24 item 9): a position-controlled robot's command and
state CSV files, replayed with mode: position through MuJoCo position actuators, fit the
servo gains kp / kv and the joint damping; the truth the generator used lies inside the 95 %
intervals."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "examples" / "quadruped_leg"


def _generator():  # type: ignore[no-untyped-def]
    """The example's generate.py by path (the Panda example has a module of the same name)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("quadruped_leg_generate",
                                                  EXAMPLE / "calibration_data" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = _generator()


def test_generator_makes_the_committed_logs(tmp_path: Path) -> None:
    folder = tmp_path / "quadruped_leg"
    shutil.copytree(EXAMPLE, folder)
    done = subprocess.run([sys.executable, str(folder / "calibration_data" / "generate.py")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    for name in ("command.csv", "state.csv"):
        assert (folder / "calibration_data" / name).read_bytes() == \
            (EXAMPLE / "calibration_data" / name).read_bytes()


def test_fit_recovers_servo_gains_and_damping() -> None:
    """kp / kv (actuator_position_kp / _kv) and the joint damping from the two files: every
    true value within 3 standard deviations, at least 5 of 6 inside the 95 % intervals (this
    data: 6), the standardized residual RMS at the noise (1.0)."""
    from fibril_calibration.engine import run_calibration

    result = run_calibration(EXAMPLE / "calibration.yaml")
    document = result.document
    assert document["fit"]["verdict"] == "plausible_fit"
    assert 0.95 < result.outcome.training_summary.rms < 1.05
    per = {p["id"]: p for p in document["local_identifiability"]["parameters"]}
    inside = 0
    for name, truth in generate.TRUTH.items():
        entry = per[name]
        assert abs(result.fitted_values[name] - truth) < 3 * entry["standard_deviation"], name
        low, high = entry["interval_95"]
        inside += low <= truth <= high
    assert inside >= 5
    used = document["episodes"]["training"][0]["source"]["sources"]
    assert [Path(u["path"]).name for u in used] == ["command.csv", "state.csv"]
