"""The fast DeviceSample encoder must be byte-identical to the typestore's serializer."""

from __future__ import annotations

import numpy as np
import pytest

from fibril_sim_core.records import DeviceOutput
from fibril_sim_core.trace import TraceWriter


@pytest.mark.parametrize(("frame", "device", "names", "values"), [
    ("imu", "chassis_imu", ("gx", "gy", "gz", "ax", "ay", "az"),
     [0.1, -0.2, 0.3, 0.0, 1e-9, 9.81]),
    ("", "a", ("x",), [1.5]),
    ("wheel_joint_long_frame", "enc/odd", ("position", "velocity", "counts"), [3.0, -1.0, 12.0]),
    ("f", "empty", (), []),
])
def test_fast_encoding_matches_generic(tmp_path, frame, device, names, values):
    writer = TraceWriter(tmp_path / "bag", provenance={}, layout={})
    try:
        record = DeviceOutput(3, device, "fibril_sim/test/v1", 7, 7_000_000, 9_000_000,
                              5_123_456_789, 5_125_456_789, np.array(values, dtype=float),
                              names, frame)
        fast = bytes(writer._encode_device(record)[3])
        generic = bytes(writer._encode_device_generic(record)[3])
        assert fast == generic
        again = bytes(writer._encode_device(record._replace(episode=4))[3])
        assert again != fast and len(again) == len(fast)
    finally:
        writer.close()
