"""The test harness's own ROS 2 side: one rclpy node on the harness's private domain.

``SimHarness`` drives the simulation through it: service calls with wall-time limits,
publishers that wait for a match, buffered subscriptions, and spinning that checks after
every wait that the started processes still run (a crashed node is reported with its log
instead of a timeout).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from .processes import (ManagedProcess, SimHarnessError, WaitTimeout, check_alive,
                        commanding_nodes, diagnostics, node_endpoints)

if TYPE_CHECKING:
    from rclpy.client import Client
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.publisher import Publisher
    from rclpy.qos import QoSProfile
    from rclpy.subscription import Subscription

M = TypeVar('M')


@dataclass
class Stream(Generic[M]):
    """A harness subscription and what it received since the last mark."""

    subscription: Subscription[M] | None = None
    messages: list[M] = field(default_factory=list)


class HarnessSession:
    """The harness's rclpy context, node and executor on ``domain_id``; ``processes`` is the
    harness's (growing) list of started processes, checked while waiting."""

    def __init__(self, domain_id: int, name: str, processes: Sequence[ManagedProcess],
                 node_name: str) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions

        self.processes = processes
        self.node_name = node_name
        self.events = 0  # messages received so far (``drain`` waits for it to stop moving)
        self._clients: dict[str, Client[object, object]] = {}
        self._publishers: dict[tuple[str, type], Publisher[object]] = {}
        self._streams: dict[tuple[str, type], Stream[object]] = {}
        self._context: Context = rclpy.Context()
        rclpy.init(context=self._context, domain_id=domain_id,
                   signal_handler_options=SignalHandlerOptions.NO)
        self.node: Node = rclpy.create_node(name, context=self._context)
        self._executor: SingleThreadedExecutor = SingleThreadedExecutor(context=self._context)
        self._executor.add_node(self.node)

    def close(self) -> None:
        self._executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        self._context.try_shutdown()

    # -- services -----------------------------------------------------------------------------
    def client(self, service: str, srv_type: type) -> Client[object, object]:
        """The client of the node's ``~/service`` (made once, kept)."""
        if service not in self._clients:
            self._clients[service] = self.node.create_client(
                srv_type, f'/{self.node_name}/{service}')
        return self._clients[service]

    def call(self, service: str, srv_type: type, request: object, timeout_wall: float) -> object:
        """The node's reply to ``request`` on ``~/service``; SimHarnessError when it says it
        failed, WaitTimeout after ``timeout_wall`` s."""
        check_alive(self.processes)
        client = self.client(service, srv_type)
        future = client.call_async(request)
        deadline = time.monotonic() + timeout_wall
        while not future.done():
            if time.monotonic() > deadline:
                client.remove_pending_request(future)
                raise WaitTimeout(f'/{self.node_name}/{service}: no reply within '
                                  f'{timeout_wall} s of wall time{diagnostics(self.processes)}')
            self._executor.spin_once(timeout_sec=0.05)
            check_alive(self.processes)
        reply = future.result()
        if getattr(reply, 'success', True) is False:  # the replies that have a status field
            raise SimHarnessError(f'/{self.node_name}/{service} failed: '
                                  f'{getattr(reply, "message", "")}')
        return reply

    # -- topics -------------------------------------------------------------------------------
    def publish(self, topic: str, msg: object, qos: QoSProfile, timeout_wall: float) -> None:
        """Publish ``msg`` on ``topic``, once a subscriber is matched."""
        key = (topic, type(msg))
        if key not in self._publishers:
            publisher = self.node.create_publisher(type(msg), topic, qos)
            self._publishers[key] = publisher
            self.spin_until(lambda: publisher.get_subscription_count() > 0, timeout_wall,
                            f'no subscriber matched {topic} within {timeout_wall} s')
            self.spin_for(0.05)  # let the subscriber's side of the match complete too
        self._publishers[key].publish(msg)

    def stream(self, topic: str, msg_type: type[M], qos: QoSProfile,
               match_timeout: float) -> Stream[M]:
        """The buffered subscription of ``topic`` (made on first use, once a publisher is
        matched or ``match_timeout`` s passed)."""
        key = (topic, msg_type)
        known = self._streams.get(key)
        if known is not None:
            return known  # type: ignore[return-value]  # keyed by msg_type: a Stream[M]
        stream: Stream[M] = Stream()

        def on_message(msg: M, messages: list[M] = stream.messages) -> None:
            self.events += 1
            messages.append(msg)

        subscription = self.node.create_subscription(msg_type, topic, on_message, qos)
        stream.subscription = subscription
        self._streams[key] = stream  # type: ignore[assignment]  # (see above)
        if self.spin_until(lambda: subscription.get_publisher_count() > 0, match_timeout, None):
            self.spin_for(0.05)  # the publisher's side of the match
        return stream

    # -- spinning -----------------------------------------------------------------------------
    def spin_once(self, timeout: float) -> None:
        self._executor.spin_once(timeout_sec=timeout)

    def drain(self, quiet: float = 0.01, limit: float = 5.0) -> None:
        """Run callbacks until no message arrives for ``quiet`` s of wall time (what the node
        published before its last reply has landed and been taken by then)."""
        now = time.monotonic()
        end, last, seen = now + limit, now, self.events
        while now < end and now - last < quiet:
            self._executor.spin_once(timeout_sec=quiet / 4)
            now = time.monotonic()
            if self.events != seen:
                last, seen = now, self.events

    def spin_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self._executor.spin_once(timeout_sec=max(0.0, min(0.01, end - time.monotonic())))

    def spin_until(self, condition: Callable[[], bool], timeout_wall: float,
                   error: str | None) -> bool:
        """Spin until ``condition()``; after ``timeout_wall`` s raise WaitTimeout(``error``),
        or return False when ``error`` is None."""
        deadline = time.monotonic() + timeout_wall
        while not condition():
            if time.monotonic() > deadline:
                if error is not None:
                    raise WaitTimeout(f'{error}{diagnostics(self.processes)}')
                return False
            self._executor.spin_once(timeout_sec=0.02)
            check_alive(self.processes)
        return True

    def wait_settled_controllers(self, deadline: float, quiet: float = 0.3) -> None:
        """Until the controllers' endpoints (publishers and subscriptions) stop changing for
        ``quiet`` s: a node makes them in its constructor, so by then it is built (its /clock
        subscription included), not just begun."""
        graph, name = self.node, self.node_name

        def endpoints() -> set[tuple[str, str, str]]:
            return node_endpoints(graph, commanding_nodes(graph, name))

        last, since = endpoints(), time.monotonic()
        while time.monotonic() - since < quiet and time.monotonic() < deadline:
            self._executor.spin_once(timeout_sec=0.05)
            check_alive(self.processes)
            now = endpoints()
            if now != last:
                last, since = now, time.monotonic()
