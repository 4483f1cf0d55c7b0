"""A simulation server holds no memory for abusive clients (issue 23, item 4).

``fibril_sim serve`` runs in a child process on loopback TCP; the abuse comes from this process
(bounded: one 100 MiB frame, 100 clients) and the server's RSS is read from /proc. Before the
fix one unauthenticated 100 MiB frame left the server ~200 MiB larger, and silent subscribed
clients left their memory behind after they had gone.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import zmq
from _abuse import SilentClient, rss_mb, send_raw, settled_rss_mb
from _children import MANIFEST, Child, refusal_line, wait_for
from _patience import patience

from fibril_sim_core import ServerError, SimulationConnection, SimulationRuntime
from fibril_sim_core.manifest import RuntimeOptions
from fibril_sim_core.plan import SimulationBuilder
from fibril_sim_core.runtime import ServerOptions, protocol

TOKEN = b"abuse-test-token-0123456789abcdef"
MIB = 1 << 20

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(),
                                reason="reads RSS from /proc (Linux)")


@pytest.fixture()
def server(tmp_path: Path):
    """``fibril_sim serve`` on 127.0.0.1 with a token, as fast as possible, paused; (child, address)."""
    token = tmp_path / "token"
    token.write_bytes(TOKEN)
    token.chmod(0o600)
    child = Child(["serve", MANIFEST, "--tcp", "127.0.0.1:0", "--token-file", token,
                   "--mode", "fast", "--paused"], tmp_path)
    try:
        line = child.first_line()
        assert line.startswith("serving tcp://127.0.0.1:"), line
        yield child, line.split(" ", 1)[1]
    finally:
        child.close()


def test_an_oversized_frame_before_authentication_costs_no_memory(server) -> None:
    child, address = server
    pid = child.process.pid
    with SimulationConnection.connect(address, token=TOKEN) as observer:
        observer.step(10)
        baseline = settled_rss_mb(pid)
        context = zmq.Context()
        try:
            # 100 MiB in one frame: the connection is closed before it is read; no answer
            assert send_raw(context, address, [bytes(100 * MIB)], timeout=5,
                            until_closed=True) is None
            peak = rss_mb(pid)
            # within the frame limit but over the one before authentication: refused unread
            answer = send_raw(context, address, [bytes(512 * 1024)])
            assert answer is not None and answer["t"] == "refused"
            assert answer["reason"] == ("a message of 524288 bytes before authentication "
                                        "(at most 4096)")
            answer = send_raw(context, address, [protocol.request("hello"), b"x"])
            assert answer is not None and answer["reason"] == "a message is one frame, got 2"
            answer = send_raw(context, address, [b"\xc1 not msgpack"])
            assert answer is not None and answer["reason"].startswith("not a fibril_sim message")
        finally:
            context.term()
        after = settled_rss_mb(pid)
        assert observer.step(10)["tick"] == 20  # served all along
    assert peak < baseline + 20, (baseline, peak)
    assert after < baseline + 10, (baseline, after)
    assert "a message of 524288 bytes before authentication" in child.stderr()
    assert "Traceback" not in child.stderr()


def test_silent_clients_are_bounded_and_their_memory_returns_when_they_leave(server) -> None:
    child, address = server
    pid = child.process.pid
    with SimulationConnection.connect(address, token=TOKEN, name="observer") as observer:
        observer.step(10)
        baseline = settled_rss_mb(pid)
        context = zmq.Context()
        clients = [SilentClient(context, address, TOKEN) for _ in range(100)]
        try:
            refused = [c.refused for c in clients if c.refused is not None]
            assert len(refused) == 100 - 63, refused[:3]  # the observer is the 64th
            assert refused[0] == "too many clients (64 connected, at most 64)"
            assert observer.state()["clients"] == 64
            observer.resume()  # as fast as possible: their queues fill
            held = baseline
            for _ in range(30):  # ZeroMQ's heartbeats close their connections once they stall
                time.sleep(0.1)
                held = max(held, rss_mb(pid))
            assert observer.pause()["paused"]
        finally:
            for client in clients:
                client.close()
            context.term()
        wait_for(lambda: observer.state()["clients"] == 1, 60, "the silent clients to be gone")
        # The server hands freed memory back 1, 3 and 5 s after they left (later when the
        # machine is busy): until the RSS is back near the baseline, or a while has passed.
        deadline = time.monotonic() + 6 + patience(20.0)
        after = settled_rss_mb(pid)
        while after >= baseline + 25 and time.monotonic() < deadline:
            after = settled_rss_mb(pid)
        assert observer.step(10)["paused"]
    # each holds at most its send queue (256 messages of 16 KiB at most) while connected
    assert held < baseline + 63 * 4 + 50, (baseline, held)
    print(f"server RSS: baseline {baseline:.0f} MiB, with 63 silent clients {held:.0f} MiB, "
          f"after they left {after:.0f} MiB")
    assert after < baseline + 25, (baseline, held, after)
    assert "Traceback" not in child.stderr()


def test_a_request_too_large_is_refused_by_the_client_and_by_the_server(server) -> None:
    child, address = server
    with SimulationConnection.connect(address, token=TOKEN) as connection:
        devices = [f"device-{n:08d}" for n in range(80_000)]  # 1.3 MB of names
        with pytest.raises(ServerError, match=r"a 'subscribe' request of \d+ bytes is too large "
                                              r"\(the server takes at most 1048576\)"):
            connection.on_record(lambda record: None, devices=devices)
        assert connection.step(5)["tick"] == 5
        context = zmq.Context()
        try:  # a peer that sends one anyway is cut off; the others are served
            assert send_raw(context, address, [bytes(2 * MIB)], timeout=3,
                            until_closed=True) is None
        finally:
            context.term()
        assert connection.step(5)["tick"] == 10


def test_clients_that_vanish_or_flood_are_bounded_in_process(tmp_path: Path) -> None:
    """Bookkeeping, in process: a client gone without ``bye`` is forgotten after the idle
    probe; a client's requests waiting for the host are limited."""
    plan = SimulationBuilder().build(MANIFEST)
    options = ServerOptions(socket=tmp_path / "s.sock", idle_probe=0.5)
    with SimulationRuntime(plan, server=options,
                           options=RuntimeOptions(mode="lockstep")) as runtime:
        address = runtime.address.replace("unix://", "ipc://")
        context = zmq.Context()
        try:
            vanished = context.socket(zmq.DEALER)
            vanished.connect(address)
            vanished.send(protocol.request("hello", name="vanishing"))
            assert vanished.poll(10_000)
            assert protocol.unpack(vanished.recv())["t"] == "welcome"
            local = runtime.connect()
            assert local.state()["clients"] == 1
            vanished.close(0)
            wait_for(lambda: local.state()["clients"] == 0, 30,
                     "the vanished client to be forgotten")

            flood = context.socket(zmq.DEALER)
            flood.connect(address)
            flood.send(protocol.request("hello", name="flood"))
            assert flood.poll(10_000) and protocol.unpack(flood.recv())["t"] == "welcome"
            flood.send(protocol.request("step", id=0, ticks=300_000))  # keeps the host busy
            for rid in range(1, 41):
                flood.send(protocol.request("state", id=rid))
            errors = []
            deadline = time.monotonic() + 30
            while len(errors) < 40 - 15 and time.monotonic() < deadline:
                if flood.poll(200):
                    reply = protocol.unpack(flood.recv())
                    if not reply.get("ok"):
                        errors.append(reply["message"])
            assert len(errors) == 25, errors
            assert errors[0] == ("state: 16 requests of this client wait for the simulation "
                                 "already (at most 16)")
            flood.close(0)
        finally:
            context.term()


@pytest.mark.parametrize("seconds", ["0", "nan", "1e9"])
def test_serve_refuses_an_idle_probe_out_of_range_in_one_line(tmp_path: Path, seconds: str) -> None:
    line = refusal_line("serve", MANIFEST, "--idle-probe", seconds,
                        "--socket", tmp_path / "s.sock")
    assert f"--idle-probe {float(seconds):g}: must be" in line, line
