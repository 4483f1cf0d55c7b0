"""Bad arguments and misbehaving peers never stop the simulation host or the server thread;
callbacks that call back into the connection fail at once; stop() reports a host that is
still running."""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import zmq
from _runtime_rig import hinge_plan, runtime_starter
from fibril_sim_core.runtime import protocol

from fibril_sim_core import (
    DeviceOutput,
    InstanceError,
    ServerOptions,
    SimulationConnection,
    SimulationPlan,
    SimulationRuntime,
)


@pytest.fixture()
def plan(tmp_path: Path) -> SimulationPlan:
    return hinge_plan(tmp_path)


@pytest.fixture()
def start(plan: SimulationPlan) -> Iterator[Callable[..., SimulationRuntime]]:
    yield from runtime_starter(seed=1, plan=plan)


# ------------------------------------------------------------------ host: bad arguments
@pytest.mark.parametrize(("call", "message"), [
    (lambda c: c.step("x"), "step: ticks must be an integer >= 0, got 'x'"),
    (lambda c: c.step(1.5), "step: ticks must be an integer >= 0, got 1.5"),
    (lambda c: c.step(True), "step: ticks must be an integer >= 0, got True"),
    (lambda c: c.step(None), "step: ticks must be an integer >= 0, got None"),
    (lambda c: c.step(-1), "step: ticks must be >= 0, got -1"),
    (lambda c: c.reset(keyframe=5), "reset: keyframe must be a keyframe name or None, got 5"),
    (lambda c: c.reset(keyframe=["a"]), "reset: keyframe must be a keyframe name or None"),
    (lambda c: c.reset(seed=1 << 64), r"reset: seed must be an integer in \[0, 2\*\*64\)"),
    (lambda c: c.reset(seed=-1), r"reset: seed must be an integer in \[0, 2\*\*64\)"),
    (lambda c: c.reset(seed="1"), r"reset: seed must be an integer in \[0, 2\*\*64\)"),
    (lambda c: c.stop_render([1]), r"stop_render: stream must be a stream id .*got \[1\]"),
    (lambda c: c.stop_render("1"), "stop_render: stream must be a stream id"),
    (lambda c: c.stop_render(True), "stop_render: stream must be a stream id"),
    (lambda c: c.stop_render(99), "stop_render: no render stream 99"),
    (lambda c: c.render(["cam"], 8, 8, 10.0), "render: camera must be a camera name"),
    (lambda c: c.render(3, 8, 8, 10.0), "render: camera must be a camera name"),
])
def test_a_bad_argument_is_refused_and_the_host_goes_on(start, call, message) -> None:
    runtime = start(mode="lockstep")
    connection = runtime.connect()
    connection.step(3)
    with pytest.raises(InstanceError, match=message):
        call(connection)
    assert runtime.host.failure is None and runtime.host.running
    assert connection.step(2)["tick"] == 5  # the simulation still steps


def test_numpy_integer_ticks_still_step(start) -> None:
    connection = start(mode="lockstep").connect()
    assert connection.step(np.int64(4))["tick"] == 4


def test_raw_host_requests_with_bad_shapes_are_refused(start) -> None:
    """Requests the connection methods would never build still do not stop the host."""
    runtime = start(mode="lockstep")
    host = runtime.host
    for action, argument in [("reset", None), ("reset", ("a", 1, 2)), ("stop_render", 5),
                             ("render", None), ("render", ("not a request", None, None)),
                             ("rtf", "fast"), ("rtf", float("inf")), ("rtf", 0),
                             ("mode", "lockstep"), ("mode", ["fast"]), ("nonsense", None)]:
        with pytest.raises(InstanceError):
            host.request(action, argument)
        assert host.failure is None and host.running, (action, argument)
    assert host.request("step", 1)["tick"] == 1


def test_an_unexpected_error_outside_stepping_is_answered_not_fatal(start,
                                                                   monkeypatch) -> None:
    runtime = start(mode="lockstep")
    host = runtime.host

    def broken(*args, **kwargs):
        raise RuntimeError("render backend broke")

    monkeypatch.setattr(host._renders, "add", broken)
    with pytest.raises(InstanceError, match="render: RuntimeError: render backend broke"):
        runtime.connect().render("", 8, 8, 10.0)
    assert host.failure is None
    assert runtime.connect().step(1)["tick"] == 1


# ------------------------------------------------------------------ host: callbacks, stop
def test_a_callback_calling_the_connection_fails_at_once(start) -> None:
    runtime = start(mode="lockstep")
    connection = runtime.connect()
    errors: list[tuple[str, InstanceError]] = []
    calls = {"pause": connection.pause, "state": connection.state,
             "step": lambda: connection.step(1), "reset": connection.reset}

    def call_back(record) -> None:
        if isinstance(record, DeviceOutput) and not errors:
            for name, call in calls.items():
                try:
                    call()
                except InstanceError as exc:
                    errors.append((name, exc))

    connection.on_record(call_back)
    began = time.monotonic()
    assert connection.step(4)["tick"] == 4
    assert time.monotonic() - began < 5  # not the 60 s request timeout
    assert [name for name, _ in errors] == list(calls)
    for _, exc in errors:
        assert "cannot be called from a record callback (it runs on the host thread)" in \
            str(exc)
    assert runtime.host.failure is None


def test_stop_keeps_a_host_thread_that_did_not_end(start) -> None:
    runtime = start(mode="lockstep")
    connection = runtime.connect()
    entered, release = threading.Event(), threading.Event()

    def block(record) -> None:
        if isinstance(record, DeviceOutput):
            entered.set()
            release.wait(10)

    connection.on_record(block)
    stepper = threading.Thread(target=lambda: _quietly(lambda: connection.step(1)))
    stepper.start()
    assert entered.wait(5)
    try:
        with pytest.raises(InstanceError, match="did not stop within 0.2 s"):
            runtime.host.stop(timeout=0.2)
        assert runtime.host.running  # the thread is kept, not forgotten
    finally:
        release.set()
    runtime.host.stop()
    assert not runtime.host.running
    stepper.join(5)
    runtime.host.stop()  # idempotent once it has ended


def _quietly(call: Callable[[], object]) -> None:
    try:
        call()
    except InstanceError:
        pass


def test_an_all_kinds_callback_keeps_the_unfiltered_fast_path(start) -> None:
    """Render frames never pass through the host's dispatch, so an all-kinds subscriber
    needs no filter there (None: no RecordFilter.matches per record)."""
    runtime = start(mode="lockstep")
    connection = runtime.connect()
    records: list = []
    connection.on_record(records.append)
    connection.on_record(records.append, kinds="device_output")
    filters = [f for callback, f in runtime.host._callbacks if callback == records.append]
    assert filters[0] is None
    assert filters[1] is not None and filters[1].kinds == {"device_output"}
    connection.step(4)
    assert records


# ------------------------------------------------------------------ server: bad peers
def _dealer(context: zmq.Context, address: str) -> zmq.Socket:
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect("ipc://" + address[len("unix://"):])
    return sock


def _answer(sock: zmq.Socket) -> dict:
    assert sock.poll(5000), "the server did not answer"
    return protocol.unpack(sock.recv())


def test_malformed_messages_never_stop_the_server(start, caplog) -> None:
    runtime = start(server=ServerOptions(), mode="lockstep")
    context = zmq.Context()
    try:
        # Before authentication: an attach with a list as client id, garbage, a non-map.
        stranger = _dealer(context, runtime.address)
        for document in ({"v": 1, "op": "attach", "client": [1], "key": b"k"},
                         {"v": 1, "op": "attach", "client": {"a": 1}, "key": b"k"},
                         {"v": 1, "op": "attach", "client": True, "key": b"k"},
                         [1, 2, 3], "hello"):
            stranger.send(protocol.pack(document))
            assert _answer(stranger)["t"] == "refused"
        stranger.send(b"\xc1 not msgpack")
        assert _answer(stranger)["t"] == "refused"

        # After authentication: bad subscriptions and bad host requests.
        peer = _dealer(context, runtime.address)
        peer.send(protocol.request("hello", name="bad"))
        assert _answer(peer)["t"] == "welcome"
        bad = [("subscribe", {"filters": [1]}), ("subscribe", {"filters": 5}),
               ("subscribe", {"filters": [{"kinds": 5}]}),
               ("subscribe", {"filters": [{"kinds": [[1]]}]}),
               ("submit", {"input": 3}), ("stop_render", {"stream": [1]}),
               ("reset", {"keyframe": 7}), ("reset", {"seed": "x"}),
               ("step", {"ticks": "x"}), ("step", {}), ("render", {"camera": [1]}),
               ("rtf", {"factor": None}), ("mode", {"mode": [1]})]
        for n, (op, fields) in enumerate(bad):
            peer.send(protocol.request(op, id=n, **fields))
            reply = _answer(peer)
            assert reply["t"] == "reply" and reply["id"] == n and reply["ok"] is False, \
                (op, fields, reply)

        # The server and the host go on: a proper client is served.
        assert runtime.server._thread.is_alive() and runtime.host.failure is None
        with SimulationConnection.connect(runtime.address, name="good") as good:
            seen: list = []
            good.on_record(seen.append, kinds="device_output")
            assert good.step(4)["tick"] == 4
            assert len(seen) == 2
        peer.close()
        stranger.close()
    finally:
        context.term()


def test_an_exception_while_handling_one_message_is_logged_and_skipped(
        start, monkeypatch, caplog) -> None:
    runtime = start(server=ServerOptions(), mode="lockstep")
    server = runtime.server
    original = server._hello
    broken = [True]

    def hello(*args):
        if broken[0]:
            broken[0] = False
            raise RuntimeError("handler bug")
        return original(*args)

    monkeypatch.setattr(server, "_hello", hello)
    context = zmq.Context()
    try:
        peer = _dealer(context, runtime.address)
        with caplog.at_level(logging.ERROR, logger="fibril_sim.server"):
            peer.send(protocol.request("hello", name="x"))
            answer = _answer(peer)
        assert answer["t"] == "refused" and "RuntimeError: handler bug" in answer["reason"]
        assert any("could not be handled" in r.message and r.exc_info for r in caplog.records)
    finally:
        context.destroy(linger=0)  # (a failed assertion must not hang in term())
    assert server._thread.is_alive()
    with SimulationConnection.connect(runtime.address) as good:
        assert good.step(2)["tick"] == 2


def test_a_failing_record_flush_is_logged_and_serving_goes_on(start, monkeypatch,
                                                             caplog) -> None:
    runtime = start(server=ServerOptions(), mode="lockstep")
    server = runtime.server
    original = server._flush_records
    failed = [False]

    def flush() -> None:
        if server._records and not failed[0]:
            failed[0] = True
            server._records.clear()  # the batch is lost, as when encoding it failed
            raise RuntimeError("flush bug")
        original()

    with SimulationConnection.connect(runtime.address) as good:
        good.on_record(lambda record: None)
        monkeypatch.setattr(server, "_flush_records", flush)
        with caplog.at_level(logging.ERROR, logger="fibril_sim.server"):
            good.step(2)
            time.sleep(0.1)
        assert server._thread.is_alive()
        assert good.step(2)["tick"] == 4
    assert failed[0]
    assert any("forwarding records failed" in r.message and r.exc_info
               for r in caplog.records)


def test_an_unexpected_send_error_drops_that_client_only(start, monkeypatch) -> None:
    runtime = start(server=ServerOptions(), mode="lockstep")
    server = runtime.server
    with SimulationConnection.connect(runtime.address, name="victim") as victim:
        victim.on_record(lambda record: None)
        (client,) = server._clients.values()
        router = server._router

        class Failing:
            def send_multipart(self, frames, flags=0):
                if frames[0] == client.stream:
                    raise zmq.ZMQError(errno=zmq.ENOTSUP)
                return router.send_multipart(frames, flags)

            def __getattr__(self, name):
                return getattr(router, name)

        monkeypatch.setattr(server, "_router", Failing())
        runtime.connect().step(2)
        deadline = time.monotonic() + 5
        while client.id in server._clients:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        monkeypatch.setattr(server, "_router", router)
        assert server._thread.is_alive()
    with SimulationConnection.connect(runtime.address) as good:
        assert good.step(2)["tick"] == 4


# ------------------------------------------------------------------ server: socket mode
def test_binding_never_changes_the_process_umask(start, tmp_path: Path, monkeypatch) -> None:
    def no_umask(mask: int) -> int:
        raise AssertionError("os.umask must not be called: it is process-wide")

    monkeypatch.setattr(os, "umask", no_umask)
    default = start(server=ServerOptions(), mode="lockstep")
    path = Path(default.address[len("unix://"):])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    chosen = tmp_path / "chosen" / "sim.sock"
    given = start(server=ServerOptions(socket=chosen), mode="lockstep")
    assert given.address == f"unix://{chosen}"
    assert stat.S_IMODE(chosen.stat().st_mode) == 0o600
    with SimulationConnection.connect(given.address) as remote:
        assert remote.step(1)["tick"] == 1

