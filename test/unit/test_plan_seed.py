"""Plan provenance holds the episode seed (concepts: the plan keeps model, manifest, parameter
set, resolved assets, MuJoCo version, extensions and episode seed): ``inspect --json`` shows the
seed a plan's instances start from, instances start from it, and traces and experiment results
record the seed a run used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fibril_sim_core.cli import main
from fibril_sim_core.plan import SimulationBuilder
from fibril_sim_core.trace.reader import TraceReader

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "examples" / "drivetrain"


def _manifest(tmp_path: Path, seed: int | None) -> Path:
    document = yaml.safe_load((EXAMPLE / "simulation.yaml").read_text())
    document["model"] = str(EXAMPLE / document["model"])
    if seed is not None:
        document.setdefault("scenario", {})["seed"] = seed
    path = tmp_path / "simulation.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _inspect(capsys: pytest.CaptureFixture[str], manifest: Path) -> dict:
    assert main(["inspect", str(manifest), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_inspect_json_shows_the_default_seed(capsys: pytest.CaptureFixture[str]) -> None:
    document = _inspect(capsys, EXAMPLE / "simulation.yaml")
    assert document["provenance"]["episode_seed"] == 0
    assert document["scenario"]["seed"] == 0


def test_manifest_seed_is_the_plan_seed_and_instances_start_from_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _manifest(tmp_path, 41)
    document = _inspect(capsys, manifest)
    assert document["provenance"]["episode_seed"] == 41
    assert document["scenario"]["seed"] == 41
    plan = SimulationBuilder().build(manifest)
    assert plan.episode_seed == 41 and plan.provenance["episode_seed"] == 41
    assert plan.create_instance().seed == 41
    assert plan.create_instance(3).seed == 3
    # Noise follows the seed: the default instance equals one created with seed 41 explicitly.
    runs = []
    for instance in (plan.create_instance(), plan.create_instance(41), plan.create_instance(3)):
        instance.advance(50)
        runs.append([o.values.tolist() for o in instance.poll() if hasattr(o, "values")])
    assert runs[0] == runs[1] and runs[0] != runs[2]
    assert plan.run_provenance(9)["episode_seed"] == 9


def test_trace_records_the_seed_the_run_used(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _manifest(tmp_path, 41)
    assert main(["run", str(manifest), "--steps", "20", "--trace", str(tmp_path / "t1")]) == 0
    assert main(["run", str(manifest), "--steps", "20", "--seed", "5",
                 "--trace", str(tmp_path / "t2")]) == 0
    capsys.readouterr()
    for trace, seed in (("t1", 41), ("t2", 5)):
        with TraceReader(tmp_path / trace) as reader:
            assert reader.provenance["episode_seed"] == seed
            assert reader.provenance["seed"] == seed
            assert [e.seed for e in reader.episodes()] == [seed]


def test_a_bad_seed_names_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _manifest(tmp_path, -1)
    assert main(["inspect", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert "scenario.seed" in err and "-1" in err
