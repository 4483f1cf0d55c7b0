"""Recordings as robots write them, read as timestamped streams: rosbag2 / MCAP / sqlite3 bags
(``sources``, ``bag_readers``, ``mcap_integrity``), CSV logs (``csv_columns``), the lab's Franka
ring logs (``franka``), opening any of them (``formats``), fibril_sim traces (``traces``) and
per-signal time offsets (``time_offsets``).

The lowest layer above the shared vocabulary: nothing here knows the request or the solver.
"""
