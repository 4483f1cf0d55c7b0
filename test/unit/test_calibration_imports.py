"""Start-up cost: a calibration that reports no statistical interval never imports scipy.stats
(about 0.4-0.7 s of a ``fibril_sim calibrate`` process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _calibration_rig import request_doc, synthesize, write_request, write_rig

SCRIPT = """
import sys
from fibril_calibration.engine import run_calibration
result = run_calibration(sys.argv[1])
print(result.document["likelihood_interpretation_valid"], "scipy.stats" in sys.modules)
"""


def _run(request: Path) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(request)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_scipy_stats_is_imported_only_for_intervals(tmp_path: Path) -> None:
    manifest = write_rig(tmp_path)
    doc = synthesize(tmp_path, request_doc(manifest), {"damping": 0.05})
    assert _run(write_request(tmp_path, doc, "plain.yaml")) == ["False", "False"]
    valid = dict(doc, objective={"standardized_gaussian_residuals": True})
    assert _run(write_request(tmp_path, valid, "valid.yaml")) == ["True", "True"]
