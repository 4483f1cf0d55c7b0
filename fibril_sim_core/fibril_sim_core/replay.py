"""Replayed input blocks and state capture: what lets an instance step a stretch of
recorded commands as one ``mujoco.rollout`` and still hand the caller the states it asked for.

``block_controls`` builds the ctrl table of such a block (the same controls tick-by-tick
stepping would apply, bit for bit); ``roll`` runs it; ``StateCapture`` keeps qpos / qvel /
act / sensordata at chosen ticks, filled from single steps or straight from a rollout.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager

import mujoco
import numpy as np
from mujoco import rollout

from .errors import InstanceError
from .read_schedule import NEVER
from .recorded_inputs import BlockControls, ControlTrajectory, RecordedInputs

__all__ = ["CAPTURE_FIELDS", "MIN_ROLLOUT_TICKS", "BlockControls", "StateCapture",
           "block_controls", "replay_controls", "roll", "state_offsets"]

#: Shorter replay blocks step tick by tick.
MIN_ROLLOUT_TICKS = 8
CAPTURE_FIELDS = ("qpos", "qvel", "act", "sensordata")


class StateCapture:
    """Values of qpos / qvel / act / sensordata at chosen ticks, filled as the instance runs.

    Row ``i`` holds the state x(t) at ``ticks[i]`` and the sensordata computed from it (MuJoCo
    computes that during the step t → t+1, so it is filled once that step is done).
    """

    def __init__(self, model: mujoco.MjModel, ticks: np.ndarray, fields: Sequence[str]) -> None:
        unknown = sorted(set(fields) - set(CAPTURE_FIELDS))
        if unknown:
            raise InstanceError(f"capture: unknown field(s) {', '.join(unknown)}; expected "
                                f"{', '.join(CAPTURE_FIELDS)}")
        self.ticks = ticks
        sizes = {"qpos": model.nq, "qvel": model.nv, "act": model.na,
                 "sensordata": model.nsensordata}
        self.values = {name: np.full((ticks.shape[0], sizes[name]), np.nan) for name in fields}
        self._state = tuple(name for name in fields if name != "sensordata")
        self._sensordata = "sensordata" in fields
        self.next_state = 0  # index of the next row whose state is still to be taken
        self.next_sensor = 0 if self._sensordata else ticks.shape[0]

    @property
    def complete(self) -> bool:
        rows = int(self.ticks.shape[0])
        return self.next_state >= rows and self.next_sensor >= rows

    def next_event(self, t: int) -> int:
        """The next boundary after ``t`` at which this capture takes something."""
        following = NEVER
        if self.next_state < self.ticks.shape[0]:
            following = int(self.ticks[self.next_state])
        if self.next_sensor < self.ticks.shape[0]:
            following = min(following, int(self.ticks[self.next_sensor]) + 1)
        return following if following > t else t + 1

    def take_state(self, t: int, data: mujoco.MjData) -> None:
        """At boundary ``t`` (MjData holds x(t)): take the state of a row due at ``t``."""
        row = self.next_state
        if row < self.ticks.shape[0] and self.ticks[row] == t:
            for name in self._state:
                self.values[name][row] = getattr(data, name)
            self.next_state = row + 1

    def take_sensordata(self, t: int, data: mujoco.MjData) -> None:
        """At boundary ``t``: MjData's sensordata belongs to x(t-1)."""
        row = self.next_sensor
        if row < self.ticks.shape[0] and self.ticks[row] == t - 1:
            self.values["sensordata"][row] = data.sensordata
            self.next_sensor = row + 1

    def take_rollout(self, start: int, states: np.ndarray, sensordata: np.ndarray,
                     offsets: dict[str, tuple[int, int]]) -> None:
        """From one rollout of ``k`` steps starting at ``start``: state row ``i`` is x(start+i+1)
        and sensordata row ``i`` belongs to x(start+i)."""
        ticks = self.ticks
        # Rows before ``end`` are due before x(start+k), which the boundary after takes.
        end = int(np.searchsorted(ticks, start + states.shape[0], side="left"))
        rows = np.arange(self.next_state, end)
        if rows.size:
            at = ticks[rows] - start - 1
            for name in self._state:
                first, size = offsets[name]
                self.values[name][rows] = states[at, first:first + size]
            self.next_state = end
        if self._sensordata:
            rows = np.arange(self.next_sensor, end)
            if rows.size:
                self.values["sensordata"][rows] = sensordata[ticks[rows] - start]
                self.next_sensor = end


def state_offsets(model: mujoco.MjModel) -> dict[str, tuple[int, int]]:
    """Where qpos / qvel / act sit in a full-physics state vector: (offset, size)."""
    size = mujoco.mj_stateSize
    bits = mujoco.mjtState
    time = size(model, bits.mjSTATE_TIME)
    qpos = size(model, bits.mjSTATE_QPOS)
    qvel = size(model, bits.mjSTATE_QVEL)
    return {"qpos": (time, qpos), "qvel": (time + qpos, qvel),
            "act": (time + qpos + qvel, size(model, bits.mjSTATE_ACT))}


def block_controls(ctrl: np.ndarray, t: int, end: int,
                    waiting: Sequence[tuple[int, int, float]],
                    records: RecordedInputs | None, controls: ControlTrajectory | None,
                    first: int) -> BlockControls:
    """The ctrl of every step ``t`` → ``end`` when the block starts from ``ctrl``, with the
    ``waiting`` releases (row, index, value) and the recorded inputs from entry ``first`` on.

    Returns the table, how many recorded inputs the block commits and, of those, the ones
    released after it: (release tick, entry index)."""
    k = end - t
    nu = ctrl.shape[0]
    table = np.empty((k, nu))
    table[:] = ctrl
    rows = np.array([w[0] for w in waiting], dtype=np.int64)
    cols = np.array([w[1] for w in waiting], dtype=np.intp)
    values = np.array([w[2] for w in waiting], dtype=np.float64)
    consumed = 0
    later: tuple[tuple[int, int], ...] = ()
    distinct = True
    if records is not None and controls is not None:
        last = int(np.searchsorted(records.commit_ticks, end, side="left"))
        release = controls.release_ticks[first:last]
        inside = release < end
        rows = np.concatenate((rows, release[inside] - t))
        cols = np.concatenate((cols, controls.indices[first:last][inside]))
        values = np.concatenate((values, controls.values[first:last][inside]))
        consumed = last - first
        later = tuple((int(release[n]), first + int(n)) for n in np.flatnonzero(~inside))
        distinct = controls.distinct
    if rows.size:
        table[:] = np.nan
        table[0] = ctrl
        if waiting or not distinct:
            # Later commands overwrite earlier ones on one tick and ctrl: keep the last.
            _, keep = np.unique((rows * nu + cols)[::-1], return_index=True)
            keep = rows.size - 1 - keep
            rows, cols, values = rows[keep], cols[keep], values[keep]
        table[rows, cols] = values
        filled = np.where(np.isnan(table), 0, np.arange(k)[:, None])
        np.maximum.accumulate(filled, axis=0, out=filled)
        table = table[filled, np.arange(nu)]
    table.setflags(write=False)
    return table, consumed, later


def replay_controls(ctrl: np.ndarray, t: int, end: int,
                    waiting: Sequence[tuple[int, int, float]], records: RecordedInputs,
                    controls: ControlTrajectory, first: int) -> BlockControls:
    """``block_controls`` of a replay; without ``waiting`` releases the same for every
    instance replaying these inputs from the same ctrl, so a few are kept on ``controls``."""
    if waiting:
        return block_controls(ctrl, t, end, waiting, records, controls, first)
    key = (t, end, first, ctrl.tobytes())
    block = controls.blocks.get(key)
    if block is None:
        block = block_controls(ctrl, t, end, waiting, records, controls, first)
        if len(controls.blocks) < 16:
            controls.blocks[key] = block
    return block


def roll(model: mujoco.MjModel, data: mujoco.MjData, table: np.ndarray,
         context: AbstractContextManager[object], capture: StateCapture | None, t: int,
         layout: dict[str, tuple[int, int]]) -> None:
    """Step ``data`` through the rows of ``table`` (one ctrl per tick from boundary ``t``) in
    one rollout, filling ``capture`` from it. ``context`` is entered around the rollout."""
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    initial = np.empty(mujoco.mj_stateSize(model, spec))
    mujoco.mj_getState(model, data, initial, spec)
    warmstart = data.qacc_warmstart.copy()
    with context:
        states, sensordata = rollout.rollout(model, data, initial, table,
                                             initial_warmstart=warmstart)
    if capture is not None:
        capture.take_rollout(t, states[0], sensordata[0], layout)
