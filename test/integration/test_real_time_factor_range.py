"""A real-time factor is a finite number in [1e-6, 1e6] (or 0, as fast as possible, where a
caller offers it), checked where it is set: the manifest, ``fibril_sim serve --rtf``, a
connection's (or a remote client's) request, the node's parameter at start and at run time.
Before, 1e-12 killed ``fibril_sim serve`` (OverflowError in the host's timer), 1e-300 hung
``state()`` for 120 s and the node exited FATAL after ``ros2 param set``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from _children import MANIFEST, refusal_line

from fibril_sim_core import InstanceError, SimulationBuilder, SimulationRuntime
from fibril_sim_core.errors import ManifestError
from fibril_sim_core.manifest import RuntimeOptions

BAD = (1e-12, 1e-300, 1e7, float("nan"), float("inf"), -1.0)


def test_fibril_sim_serve_refuses_a_factor_out_of_range_in_one_line(tmp_path: Path) -> None:
    for factor in ("1e-12", "1e-300", "nan"):
        line = refusal_line("serve", MANIFEST, "--rtf", factor, "--socket", tmp_path / "s.sock")
        assert "--rtf must be" in line, line


def test_a_running_host_refuses_it_and_keeps_answering() -> None:
    plan = SimulationBuilder().build(Path(MANIFEST))
    runtime = SimulationRuntime(plan, options=RuntimeOptions(mode="realtime"))
    runtime.start()
    try:
        connection = runtime.connect()
        for factor in BAD:
            with pytest.raises(InstanceError, match="real_time_factor must be"):
                connection.set_real_time_factor(factor)
            with pytest.raises(InstanceError, match="real_time_factor must be"):
                runtime.host.request("rtf", factor)  # what a remote client's request reaches
        started = time.monotonic()
        state = connection.state()
        assert state["target_real_time_factor"] == 1.0
        assert time.monotonic() - started < 30  # answered, not hung for 120 s
        connection.set_real_time_factor(1e-6)  # the bounds themselves are fine
        connection.set_real_time_factor(1e6)
        assert connection.state()["target_real_time_factor"] == 1e6
    finally:
        runtime.stop()


@pytest.mark.parametrize("factor", [1e-12, 1e7])
def test_the_manifest_refuses_it_naming_the_key(tmp_path: Path, factor: float) -> None:
    import yaml

    source = Path(MANIFEST)
    document = yaml.safe_load(source.read_text())
    document["model"] = str(source.parent / document["model"])
    document.setdefault("runtime", {})["real_time_factor"] = factor
    manifest = tmp_path / "simulation.yaml"
    manifest.write_text(yaml.safe_dump(document))
    with pytest.raises(ManifestError, match="runtime.real_time_factor"):
        SimulationBuilder().build(manifest)


@pytest.mark.ros
def test_the_node_refuses_it_at_start_and_at_run_time(tmp_path: Path) -> None:
    pytest.importorskip("rclpy")
    from _sim_node_peer import Peer, SimProcess
    from fibril_msgs.srv import GetState
    from rcl_interfaces.msg import Parameter as ParameterMsg
    from rcl_interfaces.msg import ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters

    bad = SimProcess(tmp_path, {"manifest": MANIFEST, "real_time_factor": 1e-12}, name="bad")
    assert bad.wait(60) == 2
    assert "parameter 'real_time_factor' must be 0 (as fast as possible) or between" in \
        bad.stderr() and "Traceback" not in bad.stderr()
    sim = SimProcess(tmp_path, {"manifest": MANIFEST, "real_time_factor": 1.0})
    peer = Peer("fibril_rtf_peer")
    try:
        peer.wait_for_service(GetState, "/fibril_sim/get_state", sim)
        for factor in (1e-300, 1e-12, 1e9):
            value = ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=factor)
            reply = peer.call(SetParameters, "/fibril_sim/set_parameters", SetParameters.Request(
                parameters=[ParameterMsg(name="real_time_factor", value=value)]))
            assert not reply.results[0].successful
            assert "real_time_factor must be" in reply.results[0].reason
        state = peer.call(GetState, "/fibril_sim/get_state", GetState.Request())
        assert state.target_real_time_factor == 1.0 and sim.alive()
    finally:
        peer.close()
        sim.stop()
