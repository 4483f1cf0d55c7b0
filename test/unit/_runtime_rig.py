"""Shared set-up of the runtime tests: the hinge plan, a starter that always stops what it
started, and polling for a condition with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

from _models import HINGE_XML, build, device, motor
from _patience import patience
from fibril_sim_core.manifest import RuntimeOptions

from fibril_sim_core import ServerOptions, SimulationPlan, SimulationRuntime


def hinge_plan(folder: Path) -> SimulationPlan:
    """A motor on the hinge and a 500 Hz encoder on its shaft."""
    return build(folder, HINGE_XML, [
        motor("m", "drive", "drive/command"),
        device("enc", "encoder", {"joint": "shaft"}, period=0.002)])


def runtime_starter(seed: int, plan: SimulationPlan | None = None,
                    server: ServerOptions | None = None,
                    ) -> Iterator[Callable[..., SimulationRuntime]]:
    """Body of a fixture (``yield from``): yields ``start([plan], [server], **runtime_options)``,
    defaulting to the given plan and server options; every runtime it started is stopped when
    the test ends, passed or failed."""
    started: list[SimulationRuntime] = []
    default_plan, default_server = plan, server

    def _start(plan: SimulationPlan | None = None, server: ServerOptions | None = default_server,
               **options) -> SimulationRuntime:
        plan = plan if plan is not None else default_plan
        assert plan is not None, "runtime_starter: no plan given"
        runtime = SimulationRuntime(plan, seed=seed, server=server,
                                    options=RuntimeOptions(**options)).start()
        started.append(runtime)
        return runtime

    yield _start
    for runtime in started:
        runtime.stop()


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Until ``condition()``; ``timeout`` is a quiet machine's, scaled by ``patience``."""
    deadline = time.monotonic() + patience(timeout)
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)
