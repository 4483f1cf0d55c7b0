"""Example nodes for software-in-the-loop (SIL) runs against the Fibril simulation node.

``wheel_speed_controller`` is a production-style controller: plain rclpy and standard messages,
no MuJoCo and no Fibril Python API, so it runs against the simulation exactly as against the
robot. ``sil_demo`` starts the simulation node and that controller as processes and reports
how well the wheel tracks its setpoint and how fast the loop ran.
"""
