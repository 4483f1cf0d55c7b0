"""``fibril_sim serve`` in a child process and remote clients in this one (real processes)."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from _children import MANIFEST, Child, environment, wait_for
from _patience import patience
from fibril_sim_core.manifest import RuntimeOptions

from fibril_sim_core import (
    DeviceOutput,
    InstanceError,
    ServerError,
    SimulationBuilder,
    SimulationConnection,
    SimulationRuntime,
    external_input,
)
from fibril_sim_core.records import FrameTiming

DUTY = "fibril_sim/motor_command/v1"
TOKEN = "serve-test-token-0123456789"


def _key(record) -> tuple:
    if isinstance(record, DeviceOutput):
        return tuple(v.tobytes() if isinstance(v, np.ndarray) else v for v in record)
    return tuple(getattr(record, n).tobytes() if isinstance(getattr(record, n), np.ndarray)
                 else getattr(record, n) for n in record.__slots__)


def _script(connection) -> list:
    """The same inputs and control for the remote and the in-process client."""
    records: list = []
    connection.on_record(records.append)
    for n in range(1, 6):
        connection.submit(external_input("motor/command", n, DUTY,
                                         {"mode": "duty", "value": 0.15 * n}))
        connection.step(37)
    connection.reset(seed=21)
    connection.submit(external_input("motor/command", 6, DUTY, {"mode": "duty", "value": -0.4}))
    connection.step(120)
    return [r for r in records if not isinstance(r, FrameTiming)]  # wall times differ


@pytest.fixture()
def serve(tmp_path: Path):
    children: list[Child] = []

    def _serve(*args: str, env: dict[str, str] | None = None) -> tuple[Child, str]:
        child = Child(["serve", MANIFEST, *args], tmp_path, env=env)
        children.append(child)
        line = child.first_line()
        assert line.startswith("serving "), line
        return child, line.split(" ", 1)[1]

    yield _serve
    for child in children:
        child.close()


def test_remote_client_is_bit_identical_to_in_process(serve, tmp_path: Path) -> None:
    child, address = serve("--socket", str(tmp_path / "sim.sock"), "--mode", "lockstep",
                           "--seed", "7")
    assert address == f"unix://{tmp_path / 'sim.sock'}"
    with SimulationConnection.connect(address, name="remote") as remote:
        remote_records = _script(remote)
        assert remote.state()["seed"] == 21
    plan = SimulationBuilder().build(MANIFEST)
    with SimulationRuntime(plan, seed=7, server=None,
                           options=RuntimeOptions(mode="lockstep")) as runtime:
        local_records = _script(runtime.connect())
    assert len(remote_records) == len(local_records) > 400
    assert [_key(r) for r in remote_records] == [_key(r) for r in local_records]
    code, seconds = child.stop(signal.SIGTERM)
    assert code == 143 and seconds < patience(2.0), child.stderr()


def test_tcp_client_with_the_wrong_token_is_refused(serve, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    child, address = serve("--tcp", "127.0.0.1:0", "--token-file", str(token),
                           "--mode", "lockstep")
    assert address.startswith("tcp://127.0.0.1:")
    with pytest.raises(ServerError, match="refused by the server: wrong token"):
        SimulationConnection.connect(address, token="a-wrong-token-0123456789", timeout=10)
    with SimulationConnection.connect(address, token=TOKEN, timeout=10) as good:
        assert good.step(25)["tick"] == 25
    wait_for(lambda: "wrong token" in child.stderr(), 10, "the refusal in the log")
    assert "refused a client from 127.0.0.1" in child.stderr()
    token.chmod(0o644)
    loose = Child(["serve", MANIFEST, "--tcp", "127.0.0.1:0", "--token-file", token],
                  tmp_path)
    try:
        assert loose.process.wait(60) == 2
        assert "readable by others (mode 0644); chmod 600" in loose.stderr()
        assert "Traceback" not in loose.stderr()
    finally:
        loose.close()


def test_a_client_that_stops_reading_loses_records_not_ticks(serve) -> None:
    """A client whose reader never returns does not hold the host: its records are dropped and
    counted, the host keeps stepping and the other clients keep receiving. (That the host keeps
    its pace beside it is a wall-clock figure: bench/stalled_client.py.)"""
    child, address = serve("--mode", "realtime", "--rtf", "5")
    with SimulationConnection.connect(address, name="observer") as observer:
        seen: list[int] = []
        observer.on_record(lambda record: seen.append(1), kinds=None)
        stuck = threading.Event()
        slow = SimulationConnection.connect(address, name="stalled")
        slow.on_record(lambda record: stuck.wait(), kinds=None)  # its reader never returns
        wait_for(lambda: observer.state()["drops"].get("stalled#2", 0) > 1000, 30,
                 "the stalled client's records to be dropped")
        first, received = observer.state(), len(seen)
        wait_for(lambda: observer.state()["tick"] > first["tick"] + 2000, 30,
                 "the host to step on beside the stalled client")
        wait_for(lambda: len(seen) > received + 100, 30, "the observer to keep receiving")
        state = observer.state()
        stuck.set()
        slow.close()
    drops, before = state["drops"], first["drops"].get("stalled#2", 0)
    assert drops["observer#1"] == 0, drops
    # On a slow machine these waits can pass the server's idle_probe (30 s): the stalled
    # client, pinged with its queue full, is then forgotten with its count. The total stays.
    assert drops.get("stalled#2", before + 1) > before, drops
    assert state["dropped_records"] > before
    code, _ = child.stop(signal.SIGINT)
    assert code == 130


def test_render_observations_arrive_at_the_requested_rate(serve) -> None:
    child, address = serve("--mode", "lockstep")
    with SimulationConnection.connect(address) as remote:
        frames: list = []
        remote.on_record(frames.append, kinds="render_frame")
        try:
            remote.render("", 32, 24, 25.0, depth=True)  # the free camera, every 40 ms
        except InstanceError as exc:
            assert "MUJOCO_GL" in str(exc)
            assert remote.step(10)["tick"] == 10
            pytest.skip(f"no offscreen OpenGL in the server: {exc}")
        remote.step(400)
    assert [f.tick for f in frames] == list(range(0, 401, 40))
    assert all(f.rgb.shape == (24, 32, 3) and f.depth.shape == (24, 32) for f in frames)
    assert frames[-1].session_time_ns == 400_000_000


def test_render_without_gl_is_refused_and_the_simulation_goes_on(serve) -> None:
    env = environment(MUJOCO_GL="glfw")
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    child, address = serve("--mode", "lockstep", env=env)
    with SimulationConnection.connect(address) as remote:
        with pytest.raises(InstanceError, match=r"render: no offscreen OpenGL context "
                                                r"\(MUJOCO_GL=glfw\).*MUJOCO_GL=egl"):
            remote.render("", 32, 24, 25.0)
        with pytest.raises(InstanceError, match="render: no offscreen OpenGL"):
            remote.render("", 32, 24, 25.0)  # asked again: the same error, no abort
        assert remote.step(50)["tick"] == 50
    assert child.process.poll() is None
