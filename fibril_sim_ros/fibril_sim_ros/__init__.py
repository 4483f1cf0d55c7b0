"""Fibril Sim rclpy nodes: live simulation node, SIL example controller, calibrate-on-bag."""
