"""The host delivers each record to the callbacks whose filters pass it, and to no other.

The dispatch looks a record's type up in a table made when callbacks or filters change
(instead of asking every filter for every record): what each callback receives, and in which
order, must be what the filters' own ``matches`` says, for every kind of filter.
"""

from __future__ import annotations

import numpy as np
from _runtime_rig import hinge_plan
from fibril_sim_core.manifest import RuntimeOptions
from fibril_sim_core.records import (
    ActuatorApplication,
    DeviceOutput,
    EpisodeStart,
    FrameTiming,
    IngressRecord,
)
from fibril_sim_core.runtime.host import SimulationHost
from fibril_sim_core.runtime.subscription import AnyOf, RecordFilter


def _records() -> list:
    def sample(device: str, tick: int) -> DeviceOutput:
        return DeviceOutput(0, device, "fibril_sim/encoder_sample/v1", tick, tick, tick, tick,
                            tick, np.zeros(3), ("position", "velocity", "counts"))

    return [
        sample("enc", 1), sample("imu", 2),
        FrameTiming(0, 3, 3, 3, 0.001, 1.0),
        ActuatorApplication(0, 4, 4, 4, "drive/command", "drive", "duty", 0.5, 0.5, 0.5),
        IngressRecord(0, "drive/command", 1, "fibril_sim/motor_command/v1", "{}", True, 5, 1,
                      "", 5),
        EpisodeStart(1, 7, "rest", 6),
        sample("enc", 6),
    ]


FILTERS = [
    None,
    RecordFilter.of(kinds="frame_timing"),
    RecordFilter.of(kinds="device_output", devices=["enc"]),
    RecordFilter.of(devices=["drive/command"]),
    RecordFilter.of(kinds=["device_output", "ingress_record"]),
    RecordFilter.of(devices=[]),
    AnyOf((RecordFilter.of(kinds="frame_timing"), RecordFilter.of(devices=["imu"]))),
]


def test_each_callback_gets_what_its_filter_passes_in_order(tmp_path) -> None:
    host = SimulationHost(hinge_plan(tmp_path).create_instance(seed=0, collect=False),
                          RuntimeOptions(mode="lockstep"))
    got: list[list] = [[] for _ in FILTERS]
    handles = [host.add_callback(got[n].append, f) for n, f in enumerate(FILTERS)]
    records = _records()
    for record in records:
        host._dispatch(record)
    for n, record_filter in enumerate(FILTERS):
        want = [r for r in records if record_filter is None or record_filter.matches(r)]
        assert got[n] == want, (n, record_filter)
    assert got[2] and got[3] and got[6]  # the cases are not vacuous

    # A changed filter and a removed callback take effect for the next record.
    host.set_callback_filter(handles[1], RecordFilter.of(devices=["imu"]))
    host.remove_callback(handles[0])
    before = [len(g) for g in got]
    for record in records:
        host._dispatch(record)
    assert len(got[0]) == before[0]
    assert got[1][before[1]:] == [records[1]]
