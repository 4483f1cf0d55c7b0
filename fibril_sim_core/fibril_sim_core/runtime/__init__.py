"""The live process boundary: a host thread that steps one instance, a server for clients in
other processes, and the connections through which clients (ROS 2 node, GUI, test harness)
reach it."""

from .connection import SimulationConnection
from .host import SimulationHost
from .remote import RemoteConnection
from .render import RenderRequest
from .runtime import SimulationRuntime
from .server import ServerOptions, SimulationServer
from .subscription import KIND_NAMES, RecordFilter

__all__ = ["KIND_NAMES", "RecordFilter", "RemoteConnection", "RenderRequest", "ServerOptions",
           "SimulationConnection", "SimulationHost", "SimulationRuntime", "SimulationServer"]
