"""Fibril Sim calibration engine and recording adapters (rosbag2 / MCAP / CSV)."""
