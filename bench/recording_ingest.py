"""Recording ingestion: how fast a bag becomes calibration episodes.

    python bench/recording_ingest.py [--messages 100000] [--storage mcap|sqlite3]

1. Decode rate. A rosbag2 bag of a 7-joint arm at 1 kHz, ``--messages`` in total: half
   ``/joint_commands`` (sensor_msgs/JointState effort) and half ``/joint_states`` (JointState
   position and velocity). Baseline: rosbags' own raw reading of the same bag (``Reader``
   ``messages()`` plus ``deserialize_cdr`` of every message, nothing kept). Ours:
   ``BagSource`` streams of everything a 7-joint calibration maps (7 efforts → inputs, 7
   positions → signals, 7 velocities → initial states), from a fresh open. Both in messages/s,
   one run each, and the ratio (target >= 0.5).
2. Request load. A request over a 10 s bag of the same kind: 10 windows of 1 s, 7 torque endpoints, 7 position
   signals and 7-joint initial states (70,000 recorded inputs, 70,000 reference samples):
   ``load_calibration_request`` wall time (target <= 1 s), the nominal plan build included.
3. A large CSV log (``--csv-rows``, default 10^7; ``--csv-rows 0`` skips it): t_s and 8
   value columns written by the bench into its temporary folder (~1.1 GB at 10^7 rows),
   three mapped (time + 2 values). Each reader runs in a child process, 3 times, and reports
   its wall time and peak RSS (``ru_maxrss`` of the child): ``open_source`` + ``stream`` (ours),
   ``numpy.loadtxt`` of the same three columns, and ``pandas.read_csv`` of them when pandas
   imports (``pip install -r bench/requirements.txt``). Medians, and ours / theirs ratios.
   Target: peak memory above the interpreter's baseline <= 3x the mapped data.

The machine it runs on is shared and noisy: figures are rough.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

JOINTS = tuple(f"joint{i}" for i in range(1, 8))
EPOCH = 1_700_000_000_000_000_000


def arm_xml() -> str:
    body = ""
    close = ""
    for n, joint in enumerate(JOINTS):
        axis = "0 0 1" if n % 2 == 0 else "0 1 0"
        body += (f'<body name="link{n + 1}" pos="{0 if n == 0 else 0.1} 0 {1 if n == 0 else 0}">'
                 f'<joint name="{joint}" type="hinge" axis="{axis}" damping="0.1"/>'
                 f'<geom type="capsule" fromto="0 0 0 0.1 0 0" size="0.02" mass="0.5" '
                 f'contype="0" conaffinity="0"/>')
        close += "</body>"
    motors = "".join(f'<motor name="m{n + 1}" joint="{j}" gear="1"/>'
                     for n, j in enumerate(JOINTS))
    return (f'<mujoco model="arm7"><option timestep="0.001" gravity="0 0 0"/>'
            f'<worldbody>{body}{close}</worldbody><actuator>{motors}</actuator></mujoco>')


def write_problem(folder: Path, messages: int, storage: str) -> tuple[Path, Path]:
    from fibril_sim_core.trace._msgtypes import typestore
    from rosbags.rosbag2 import StoragePlugin, Writer

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "arm7.xml").write_text(arm_xml())
    manifest = {"schema_version": {"major": 3, "minor": 1}, "model": "arm7.xml",
                "components": [{"id": f"motor{n + 1}", "type": "fibril_sim/motor",
                                "endpoint": f"{j}/command", "bind": {"actuator": f"m{n + 1}"}}
                               for n, j in enumerate(JOINTS)]}
    (folder / "arm7.yaml").write_text(yaml.safe_dump(manifest))
    store = typestore()
    JointState = store.types["sensor_msgs/msg/JointState"]
    Header = store.types["std_msgs/msg/Header"]
    Time = store.types["builtin_interfaces/msg/Time"]
    rng = np.random.default_rng(0)
    per_topic = messages // 2
    bag = folder / "arm7-bag"
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    with Writer(bag, version=9, storage_plugin=plugin) as writer:
        commands = writer.add_connection("/joint_commands", JointState.__msgtype__,
                                         typestore=store)
        states = writer.add_connection("/joint_states", JointState.__msgtype__, typestore=store)
        t = EPOCH
        for _ in range(per_topic):
            t += int(rng.uniform(0.7e6, 1.3e6))  # a jittered 1 kHz log
            stamp = Time(sec=t // 10**9, nanosec=t % 10**9)
            command = JointState(header=Header(stamp=stamp, frame_id=""), name=list(JOINTS),
                                 position=np.zeros(0), velocity=np.zeros(0),
                                 effort=rng.uniform(-1, 1, 7))
            state = JointState(header=Header(stamp=stamp, frame_id=""), name=list(JOINTS),
                               position=rng.uniform(-1, 1, 7), velocity=rng.uniform(-1, 1, 7),
                               effort=np.zeros(7))
            writer.write(commands, t, store.serialize_cdr(command, commands.msgtype))
            writer.write(states, t + 1000, store.serialize_cdr(state, states.msgtype))
    request = {
        "schema_version": {"major": 3, "minor": 1}, "manifest": "arm7.yaml",
        "parameters": [{"id": "damping", "lower": 0.01, "upper": 1.0, "initial": 0.1,
                        "targets": [f"mujoco:joint_damping:{j}" for j in JOINTS]}],
        "observations": [{"id": f"q{n + 1}", "source": "joint_position", "name": j}
                         for n, j in enumerate(JOINTS)],
        "sources": {"arm": {"path": bag.name}},
        "training": [{
            "id": "arm", "source": "arm",
            "windows": {"every": 1.0, "end": 10.0},
            "inputs": [{"topic": "/joint_commands", "field": "effort",
                        "endpoints": {j: f"{j}/command" for j in JOINTS}, "mode": "torque",
                        "commit": "next_tick"}],
            "initial_state": [{"type": "joint", "joint": j,
                               "qpos_from": {"signal": f"q{n + 1}"},
                               "qvel_from": {"topic": "/joint_states",
                                             "field": f"velocity[{j}]"}}
                              for n, j in enumerate(JOINTS)],
            "signals": {f"q{n + 1}": {"topic": "/joint_states", "field": f"position[{j}]",
                                      "alignment": "linear", "residual_scale": 0.001}
                        for n, j in enumerate(JOINTS)}}],
    }
    path = folder / "request.yaml"
    path.write_text(yaml.safe_dump(request, sort_keys=False))
    return bag, path


def raw_read(bag: Path) -> tuple[int, float]:
    from fibril_sim_core.trace._msgtypes import typestore
    from rosbags.rosbag2 import Reader

    store = typestore()
    started = time.perf_counter()
    count = 0
    with Reader(bag) as reader:
        for connection, _, raw in reader.messages():
            store.deserialize_cdr(raw, connection.msgtype)
            count += 1
    return count, time.perf_counter() - started


def ours(bag: Path) -> tuple[int, float]:
    from fibril_calibration.recordings.formats import open_source

    started = time.perf_counter()
    source = open_source(bag)
    try:
        count = 0
        for j in JOINTS:
            source.stream(topic="/joint_commands", field=f"effort[{j}]")
            source.stream(topic="/joint_states", field=f"position[{j}]")
            source.stream(topic="/joint_states", field=f"velocity[{j}]")
        for topic in ("/joint_commands", "/joint_states"):
            count += len(source.stream(topic=topic, field="position"))
    finally:
        source.close()
    return count, time.perf_counter() - started


CSV_COLUMNS = ("t_s", "tau1", "tau2", "q1", "q2", "dq1", "dq2", "i1", "i2")
CSV_MAPPED = ("t_s", "tau1", "q2")


def write_csv(path: Path, rows: int) -> int:
    """A 1 kHz log of ``rows`` rows: time and 8 values with 9 significant digits."""
    rng = np.random.default_rng(0)
    block = 200_000
    with path.open("w") as out:
        out.write(",".join(CSV_COLUMNS) + "\n")
        for start in range(0, rows, block):
            n = min(block, rows - start)
            data = rng.normal(size=(n, len(CSV_COLUMNS)))
            data[:, 0] = (np.arange(n) + start) * 1e-3
            np.savetxt(out, data, delimiter=",", fmt="%.9g")
    return path.stat().st_size


def csv_child(method: str, path: Path) -> None:
    """One reader in this (child) process: prints wall time, peak RSS, its baseline, rows."""
    import resource

    def peak() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    columns = [CSV_COLUMNS.index(c) for c in CSV_MAPPED]
    if method == "pandas":
        import pandas
    if method == "ours":
        from fibril_calibration.recordings.formats import open_source
    baseline = peak()
    started = time.perf_counter()
    if method == "ours":
        # as a request opens it: the time column and the mapped columns in one pass
        source = open_source(path, time_column="t_s", columns=CSV_MAPPED[1:])
        stream = source.stream(columns=list(CSV_MAPPED[1:]))
        rows = len(stream)
    elif method == "numpy":
        rows = np.loadtxt(path, delimiter=",", skiprows=1, usecols=columns).shape[0]
    else:
        rows = len(pandas.read_csv(path, usecols=list(CSV_MAPPED)))
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "peak": peak(), "baseline": baseline, "rows": rows}))


def csv_bench(folder: Path, rows: int, runs: int = 3) -> None:
    path = folder / "log.csv"
    started = time.perf_counter()
    size = write_csv(path, rows)
    print(f"csv: {rows:,} rows x {len(CSV_COLUMNS)} columns, {size / 1e6:.0f} MB "
          f"(written in {time.perf_counter() - started:.0f} s); mapped: "
          f"{', '.join(CSV_MAPPED)} = {rows * 8 * len(CSV_MAPPED) / 1e6:.0f} MB as float64")
    methods = ["ours", "numpy"]
    try:
        import pandas  # noqa: F401
        methods.append("pandas")
    except ImportError:
        print("pandas.read_csv: not installed (pip install -r bench/requirements.txt)")
    medians = {}
    for method in methods:
        found = []
        for _ in range(runs):
            child = subprocess.run([sys.executable, __file__, "--csv-child", method, str(path)],
                                   capture_output=True, text=True, check=True)
            found.append(json.loads(child.stdout.splitlines()[-1]))
        seconds = statistics.median(f["seconds"] for f in found)
        peak = statistics.median(f["peak"] for f in found)
        above = statistics.median(f["peak"] - f["baseline"] for f in found)
        medians[method] = (seconds, peak)
        print(f"{method:>6}: {seconds:6.1f} s, peak RSS {peak / 1e6:6.0f} MB ({above / 1e6:.0f} "
              f"MB above its {found[0]['baseline'] / 1e6:.0f} MB baseline; "
              f"{above / (rows * 8 * len(CSV_MAPPED)):.2f}x the mapped data), "
              f"median of {runs}, rows {found[0]['rows']:,}")
    ours_s, ours_peak = medians["ours"]
    for method in methods[1:]:
        seconds, peak = medians[method]
        print(f"ours / {method}: time {ours_s / seconds:.2f}x, peak RSS {ours_peak / peak:.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap")
    parser.add_argument("--csv-rows", type=int, default=10_000_000)
    parser.add_argument("--skip-bag", action="store_true", help="only the CSV part")
    parser.add_argument("--csv-child", nargs=2, metavar=("METHOD", "PATH"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.csv_child:
        csv_child(args.csv_child[0], Path(args.csv_child[1]))
        return 0
    folder = Path(tempfile.mkdtemp(prefix="fibril-ingest-"))
    try:
        if args.csv_rows:
            csv_bench(folder, args.csv_rows)
        if args.skip_bag:
            return 0
        bag, request = write_problem(folder, args.messages, args.storage)
        n_raw, t_raw = raw_read(bag)
        n_ours, t_ours = ours(bag)
        raw_rate, our_rate = n_raw / t_raw, n_ours / t_ours
        print(f"bag: {n_raw} messages ({args.storage}), 7 joints")
        print(f"rosbags raw read + deserialize: {raw_rate:,.0f} msg/s ({t_raw:.2f} s)")
        print(f"fibril BagSource, 21 mapped fields: {our_rate:,.0f} msg/s ({t_ours:.2f} s)")
        print(f"ratio: {our_rate / raw_rate:.2f} (target >= 0.5)")

        from fibril_calibration.request import load_calibration_request

        _, request = write_problem(folder / "load", 20_000, args.storage)  # 10 s at 1 kHz
        times = []
        for _ in range(2):  # the first load also imports the simulation modules
            started = time.perf_counter()
            loaded = load_calibration_request(request)
            times.append(time.perf_counter() - started)
        inputs = sum(len(e.recorded_inputs) for e in loaded.training)
        samples = sum(s.count for e in loaded.training for s in e.signals)
        print(f"request load: {len(loaded.training)} episodes, {inputs} recorded inputs, "
              f"{samples} reference samples: {times[0]:.2f} s first (imports included), "
              f"{times[1]:.2f} s again (target <= 1 s)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
