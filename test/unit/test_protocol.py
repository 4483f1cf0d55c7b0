"""The wire protocol's fast DeviceOutput path makes exactly the bytes of the generic one."""

from __future__ import annotations

import numpy as np
import pytest
from fibril_sim_core.records import DeviceOutput, FrameTiming
from fibril_sim_core.runtime import protocol


def _generic(record: DeviceOutput) -> bytes:
    return protocol.pack(["device_output", *record])


def _sample(count: int, episode: int = 0, tick: int = 7, names=None) -> DeviceOutput:
    values = np.linspace(-1.5, 2.25, count) if count else np.empty(0)
    names = tuple(f"v{i}" for i in range(count)) if names is None else names
    return DeviceOutput(episode, "imu", "fibril_sim/imu_sample/v1", tick, tick * 10**6,
                        (tick + 1) * 10**6, 5 * 10**12 + tick, 2**40 + tick, values, names,
                        "site")


@pytest.mark.parametrize("count", [0, 1, 2, 3, 6, 13, 31, 32, 33, 360, 8191, 8192, 9000])
@pytest.mark.parametrize("episode", [0, 1, 200, 70000])
def test_device_output_bytes_match_the_generic_encoding(count: int, episode: int) -> None:
    record = _sample(count, episode, tick=2**33 if episode == 70000 else 7)
    wire = protocol.record_to_wire(record)
    assert wire == _generic(record)
    back = protocol.record_from_wire(wire)
    assert type(back) is DeviceOutput
    assert back[:8] == record[:8] and back[9:] == record[9:]
    assert back.values.dtype == np.float64 and back.values.tobytes() == record.values.tobytes()


def test_other_value_layouts_take_the_generic_path() -> None:
    record = _sample(3)
    for values in (np.arange(3, dtype=np.int32), np.ones((2, 3)), np.ones(3, dtype=">f8"),
                   np.ones(6)[::2]):
        odd = record._replace(values=values)
        assert protocol.record_to_wire(odd) == _generic(odd)
        assert protocol.record_from_wire(protocol.record_to_wire(odd)).values.tolist() == \
            values.tolist()
    listed = record._replace(component_names=["a", "b", "c"])
    assert protocol.record_to_wire(listed) == _generic(listed)


def test_other_records_round_trip() -> None:
    frame = FrameTiming(1, 20, 20_000_000, 30_000_000, 0.0005, 1.01)
    assert protocol.record_from_wire(protocol.record_to_wire(frame)) == frame
