"""The live process boundary: a host thread that steps one instance, and the connections
through which clients (ROS 2 node, GUI, test harness) reach it."""

from .connection import SimulationConnection
from .host import SimulationHost
from .runtime import SimulationRuntime

__all__ = ["SimulationConnection", "SimulationHost", "SimulationRuntime"]
