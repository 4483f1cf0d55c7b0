"""Recording ingestion: how fast a bag becomes calibration episodes.

    python bench/recording_ingest.py [--messages 100000] [--storage mcap|sqlite3] [--info-gb 1]
                                     [--multi-rows 100000]

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
   its wall time and peak RSS (``ru_maxrss`` of the child): ``open_source`` + ``stream`` (ours:
   pyarrow's reader when installed, and ``ours-numpy`` with pyarrow hidden),
   ``numpy.loadtxt`` of the same three columns, and ``pandas.read_csv`` of them when pandas
   imports (``pip install -r bench/requirements.txt``). Medians, and ours / theirs ratios.
   Target: peak memory above the interpreter's baseline <= 3x the mapped data.

4. ``recording info`` (issue 24) on a ~1 GB bag of small messages written by the bench (two
   12-joint JointState topics at 1 kHz and an Imu at 500 Hz, ~2 M messages), MCAP and sqlite3,
   median of 3, against rosbags reading every message to count them. Targets: < 2 s (MCAP),
   < 5 s (sqlite3). The bags are deleted after.
5. Multi-file episodes (issue 24): 10 episodes, each from a command CSV and a state CSV of
   ``--multi-rows`` rows (19-digit ns stamps), request load time (target <= 1 s) against
   ``numpy.loadtxt`` of the same 20 files, wall and CPU time, with pyarrow's CSV reader (the
   fast-csv extra, when installed) and with the numpy path (``csv_arrow.ENABLED`` off),
   interleaved.

The machine it runs on is shared and noisy: figures are rough.
"""

from __future__ import annotations

import argparse
import importlib.util
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


def write_arm7(folder: Path) -> None:
    """arm7.xml and its manifest arm7.yaml (a torque motor endpoint per joint) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "arm7.xml").write_text(arm_xml())
    manifest = {"schema_version": {"major": 3, "minor": 1}, "model": "arm7.xml",
                "components": [{"id": f"motor{n + 1}", "type": "fibril_sim/motor",
                                "endpoint": f"{j}/command", "bind": {"actuator": f"m{n + 1}"}}
                               for n, j in enumerate(JOINTS)]}
    (folder / "arm7.yaml").write_text(yaml.safe_dump(manifest))


def write_problem(folder: Path, messages: int, storage: str) -> tuple[Path, Path]:
    from fibril_sim_core.trace.msgtypes import typestore
    from rosbags.rosbag2 import StoragePlugin, Writer

    write_arm7(folder)
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
    from fibril_sim_core.trace.msgtypes import typestore
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


INFO_TOPICS = (("/joint_states", 1_000_000), ("/joint_commands", 1_000_000),
               ("/imu", 2_000_000))  # (topic, period ns): a 1 kHz arm and a 500 Hz IMU


def write_big_bag(folder: Path, storage: str, size: int) -> tuple[Path, int]:
    """A bag of about ``size`` bytes of small messages (the hardest case for an index: 12-joint
    JointState at 1 kHz twice, Imu at 500 Hz; ~2.5 M messages per GB), payloads serialized
    once per topic and written with jittered log times."""
    from fibril_sim_core.trace.msgtypes import typestore
    from rosbags.rosbag2 import StoragePlugin, Writer

    store = typestore()
    types = store.types
    Header, Time = types["std_msgs/msg/Header"], types["builtin_interfaces/msg/Time"]
    header = Header(stamp=Time(sec=0, nanosec=0), frame_id="base")
    names = [f"leg{n // 3}_joint{n % 3}" for n in range(12)]
    state = types["sensor_msgs/msg/JointState"](header=header, name=names,
                                                position=np.ones(12), velocity=np.ones(12),
                                                effort=np.ones(12))
    v3, quat = types["geometry_msgs/msg/Vector3"], types["geometry_msgs/msg/Quaternion"]
    imu = types["sensor_msgs/msg/Imu"](
        header=header, orientation=quat(x=0.0, y=0.0, z=0.0, w=1.0),
        orientation_covariance=np.zeros(9), angular_velocity=v3(x=0.0, y=0.0, z=0.0),
        angular_velocity_covariance=np.zeros(9), linear_acceleration=v3(x=0.0, y=0.0, z=9.8),
        linear_acceleration_covariance=np.zeros(9))
    payloads = {"/joint_states": (state, "sensor_msgs/msg/JointState"),
                "/joint_commands": (state, "sensor_msgs/msg/JointState"),
                "/imu": (imu, "sensor_msgs/msg/Imu")}
    raw = {t: bytes(store.serialize_cdr(m, k)) for t, (m, k) in payloads.items()}
    per_ms = sum(len(raw[t]) * 1_000_000 / p for t, p in INFO_TOPICS)  # bytes per ms
    milliseconds = int(size / per_ms)
    bag = folder / f"big-{storage}"
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    rng = np.random.default_rng(1)
    jitter = rng.integers(-200_000, 200_000, size=4096)
    count = 0
    with Writer(bag, version=9, storage_plugin=plugin) as writer:
        connections = {t: writer.add_connection(t, payloads[t][1], typestore=store)
                       for t, _ in INFO_TOPICS}
        for ms in range(milliseconds):
            base = EPOCH + ms * 1_000_000
            for n, (topic, period) in enumerate(INFO_TOPICS):
                if (ms * 1_000_000) % period == 0:
                    writer.write(connections[topic], base + int(jitter[(ms + n) % 4096]),
                                 raw[topic])
                    count += 1
    return bag, count


def _command_seconds(bag: Path) -> float:
    """What a user waits for: ``fibril_sim recording info`` from the shell, imports included."""
    command = Path(sys.executable).with_name("fibril_sim")
    started = time.perf_counter()
    subprocess.run([str(command), "recording", "info", str(bag)], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def info_bench(folder: Path, storage: str, size: int, runs: int = 3) -> None:
    """``recording info`` on a ~``size`` bag against rosbags counting every message."""
    from fibril_calibration.recordings.recording_info import BagInfo, recording_info
    from rosbags.rosbag2 import Reader

    started = time.perf_counter()
    bag, count = write_big_bag(folder, storage, size)
    on_disk = sum(f.stat().st_size for f in bag.iterdir())
    print(f"info {storage}: {count:,} messages, {on_disk / 1e9:.2f} GB (written in "
          f"{time.perf_counter() - started:.0f} s)")
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        info = recording_info(bag)
        times.append(time.perf_counter() - started)
    assert isinstance(info, BagInfo) and info.messages == count, count
    started = time.perf_counter()
    with Reader(bag) as reader:
        counted = sum(1 for _ in reader.messages())
    baseline = time.perf_counter() - started
    assert counted == count
    target = 2.0 if storage == "mcap" else 5.0
    ours = statistics.median(times)
    command = statistics.median(_command_seconds(bag) for _ in range(runs))
    print(f"  recording info: {ours:.2f} s median of {runs} in process ({info.method}); "
          f"the whole `fibril_sim recording info` command: {command:.2f} s (target < "
          f"{target:g} s); rosbags reading every message to count them: {baseline:.1f} s; "
          f"ratio {baseline / command:.0f}x")
    shutil.rmtree(bag)


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
    if method == "ours-numpy":
        sys.modules["pyarrow"] = None  # type: ignore[assignment]  # hidden: the numpy path
    if method == "pandas":
        import pandas  # type: ignore[import-untyped]  # optional (bench/requirements.txt), no stubs
    if method.startswith("ours"):
        from fibril_calibration.recordings.formats import open_source
    baseline = peak()
    started = time.perf_counter()
    if method.startswith("ours"):
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
    if importlib.util.find_spec("pyarrow") is not None:
        methods.insert(1, "ours-numpy")  # "ours" is then pyarrow's reader; this hides it
    else:
        print("ours: the numpy reader (pyarrow, the fast-csv extra, is not installed)")
    try:
        import pandas  # noqa: F401  # type: ignore[import-untyped]  # optional, no stubs
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


def multi_file_bench(folder: Path, episodes: int = 10, rows: int = 100_000,
                     runs: int = 3) -> None:
    """A request of ``episodes`` episodes, each from two CSV files of ``rows`` rows (a 1 kHz
    command export and a state export on one clock, 100 s each): its load time (target
    <= 1 s), the nominal plan build included; baseline: numpy.loadtxt of the same files."""
    root = folder / "multi"
    write_arm7(root)
    rng = np.random.default_rng(3)
    entries, sources, files = [], {}, []
    for e in range(episodes):
        t = EPOCH + np.arange(rows, dtype=np.int64) * 1_000_000
        for kind, names in (("command", ["tau1", "tau2"]), ("state", ["q1", "q2", "dq1",
                                                                       "dq2"])):
            path = root / f"ep{e:02d}_{kind}.csv"
            values = rng.normal(0, 0.01, (rows, len(names)))
            with path.open("w") as out:
                out.write(",".join(["time_ns", *names]) + "\n")
                body = np.column_stack([t.astype(object), values])
                out.writelines(f"{int(r[0])},{r[1]:.6g},{r[2]:.6g}" +
                               "".join(f",{v:.6g}" for v in r[3:]) + "\n" for r in body)
            sources[f"ep{e}_{kind}"] = {"path": path.name}
            files.append(path)
        entries.append({
            "id": f"ep{e}", "source": f"ep{e}_command",
            "windows": [[0.0, 1.0]],
            "inputs": [{"endpoints": {"tau1": "joint1/command", "tau2": "joint2/command"},
                        "mode": "torque", "commit": "next_tick"}],
            "initial_state": [{"type": "joint", "joint": f"joint{k}",
                               "qpos_from": {"source": f"ep{e}_state", "column": f"q{k}"},
                               "qvel_from": {"source": f"ep{e}_state", "column": f"dq{k}"}}
                              for k in (1, 2)],
            "signals": {f"q{k}": {"source": f"ep{e}_state", "column": f"q{k}",
                                  "alignment": "linear", "residual_scale": 0.001}
                        for k in (1, 2)}})
    request = {"schema_version": {"major": 3, "minor": 1}, "manifest": "arm7.yaml",
               "parameters": [{"id": "damping", "lower": 0.01, "upper": 1.0, "initial": 0.1,
                               "targets": ["mujoco:joint_damping:joint1"]}],
               "observations": [{"id": f"q{k}", "source": "joint_position",
                                 "name": f"joint{k}"} for k in (1, 2)],
               "sources": sources, "training": entries}
    path = root / "request.yaml"
    path.write_text(yaml.safe_dump(request, sort_keys=False))
    from fibril_calibration.recordings import csv_arrow
    from fibril_calibration.request.document import load_calibration_request

    load_calibration_request(path)  # imports and first plan build out of the timing
    readers = ["pyarrow", "numpy"] if csv_arrow.arrow() is not None else ["numpy"]
    timed: dict[str, list[tuple[float, float]]] = {r: [] for r in readers}
    for _ in range(runs):  # the readers interleaved: a loaded machine's drift hits both
        for reader in readers:
            csv_arrow.ENABLED = reader == "pyarrow"
            wall, cpu = time.perf_counter(), time.process_time()
            loaded = load_calibration_request(path)
            timed[reader].append((time.perf_counter() - wall, time.process_time() - cpu))
    csv_arrow.ENABLED = True
    wall, cpu = time.perf_counter(), time.process_time()
    for file in files:
        np.loadtxt(file, delimiter=",", skiprows=1)
    baseline = (time.perf_counter() - wall, time.process_time() - cpu)
    print(f"multi-file load: {episodes} episodes x 2 CSV files x {rows:,} rows "
          f"({len(loaded.training)} episodes loaded), median of {runs}, wall / CPU "
          f"(process_time, all threads; target <= 1 s wall):")
    for reader in readers:
        ours = (statistics.median(w for w, _ in timed[reader]),
                statistics.median(c for _, c in timed[reader]))
        print(f"  ours, {reader} reader: {ours[0]:.2f} s / {ours[1]:.2f} s CPU; numpy.loadtxt "
              f"of the same {len(files)} files: {baseline[0]:.2f} s / {baseline[1]:.2f} s CPU; "
              f"ratio {baseline[0] / ours[0]:.1f}x wall, {baseline[1] / ours[1]:.1f}x CPU")
    shutil.rmtree(root)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap")
    parser.add_argument("--csv-rows", type=int, default=10_000_000)
    parser.add_argument("--skip-bag", action="store_true", help="only the CSV part")
    parser.add_argument("--multi-rows", type=int, default=100_000,
                        help="rows of each of the 10 x 2 CSV files of the multi-file load "
                             "(0: skip)")
    parser.add_argument("--info-gb", type=float, default=1.0,
                        help="size of the recording info bags (0: skip)")
    parser.add_argument("--csv-child", nargs=2, metavar=("METHOD", "PATH"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.csv_child:
        csv_child(args.csv_child[0], Path(args.csv_child[1]))
        return 0
    folder = Path(tempfile.mkdtemp(prefix="fibril-ingest-"))
    try:
        if args.multi_rows:
            multi_file_bench(folder, rows=args.multi_rows)
        if args.info_gb:
            for storage in ("mcap", "sqlite3"):
                info_bench(folder, storage, int(args.info_gb * 1e9))
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

        from fibril_calibration.request.document import load_calibration_request

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
