"""Where a SimulationServer listens: its Unix socket (private) and TCP address, and the
memory it hands back to the system after clients leave."""

from __future__ import annotations

import ctypes
import functools
import os
import socket as socket_module
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import zmq

from ..errors import ServerError

_UNIX_PATH_MAX = 107


@dataclass(frozen=True)
class ServerOptions:
    """Where a SimulationServer listens.

    ``socket``: the Unix socket path (None: ``fibril.sock`` in a new private directory under
    ``$XDG_RUNTIME_DIR`` or the temp dir); ``unix=False`` opens none. ``tcp``: ``HOST:PORT``
    (port 0: any free port), None: no TCP listener. ``token``: the shared secret; required
    with TCP, optional on the Unix socket. ``send_queue``: messages queued per client before
    its records are dropped. ``max_clients``: clients connected at once at most.
    ``idle_probe``: seconds without a request after which a client is checked for being gone.
    """

    socket: str | Path | None = None
    unix: bool = True
    tcp: str | None = None
    token: bytes | None = None
    send_queue: int = 256
    max_clients: int = 64
    idle_probe: float = 30.0


@dataclass
class UnixListener:
    """A bound Unix socket: its address, and the files ``close`` removes."""

    address: str
    path: Path | None = None  # the socket file (None until it is bound)
    private_dir: Path | None = None  # the directory made for it (a default socket)

    def close(self) -> None:
        """Remove the socket file and the directory made for it (best effort)."""
        if self.path is not None:
            try:
                self.path.unlink()
            except OSError:
                pass
        if self.private_dir is not None:
            try:
                self.private_dir.rmdir()
            except OSError:
                pass


def bind_unix(router: zmq.Socket[bytes], socket: str | Path | None,
              listener: UnixListener) -> None:
    """Bind ``router`` to ``socket`` (None: ``fibril.sock`` in a new private directory under
    ``$XDG_RUNTIME_DIR`` or the temp dir), mode 0600. ``listener`` records what was made as
    soon as it is made (its ``close`` cleans up also after a failure here)."""
    if socket is None:
        base = os.environ.get("XDG_RUNTIME_DIR")
        if not base or not _private_dir(Path(base)):
            base = tempfile.gettempdir()
        listener.private_dir = Path(tempfile.mkdtemp(prefix="fibril-sim-", dir=base))
        path = listener.private_dir / "fibril.sock"
    else:
        path = Path(socket).absolute()
        try:
            if not path.parent.exists():
                path.parent.mkdir(mode=0o700, parents=True)
            _clear_stale_socket(path)
        except OSError as exc:
            raise ServerError(f"server: cannot listen on {path}: "
                              f"{exc.strerror or exc}") from None
    if len(os.fsencode(path)) > _UNIX_PATH_MAX:
        raise ServerError(f"server: socket path {path} is too long for a Unix socket "
                          f"({len(os.fsencode(path))} > {_UNIX_PATH_MAX} bytes)")
    # No process-wide umask change (other threads may create files meanwhile): the default
    # socket is bound inside the private 0700 directory, so nobody else can reach it before
    # the chmod; a --socket path's directory is the user's choice. Either way 0600 at once.
    try:
        router.bind(f"ipc://{path}")
    except zmq.ZMQError as exc:
        raise ServerError(f"server: cannot listen on {path}: {exc}") from None
    listener.path = path  # removed by close, also when the chmod fails
    try:
        os.chmod(path, 0o600)
    except OSError as exc:
        raise ServerError(f"server: cannot make {path} private: "
                          f"{exc.strerror or exc}") from None
    listener.address = f"unix://{path}"


def bind_tcp(router: zmq.Socket[bytes], tcp: str) -> str:
    """Bind ``router`` to ``HOST:PORT`` (port 0: any free port); the address bound."""
    host, sep, port = tcp.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ServerError(f"server: --tcp expects HOST:PORT, got {tcp!r}")
    host = host.strip("[]") or "127.0.0.1"
    try:
        router.bind(f"tcp://{host}:{port if int(port) else '*'}")
    except zmq.ZMQError as exc:
        raise ServerError(f"server: cannot listen on tcp {host}:{port}: {exc}") from None
    endpoint = router.getsockopt(zmq.LAST_ENDPOINT)
    return endpoint.decode() if isinstance(endpoint, bytes) else str(endpoint)


def release_freed_memory() -> None:
    """Hand the memory freed by the C allocator back to the system: glibc keeps freed heap
    pages mapped, so without this a server's RSS stays at its peak after abusive clients have
    gone. Nothing where there is no ``malloc_trim`` (not glibc)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def _private_dir(path: Path) -> bool:
    try:
        info = path.stat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and \
        not info.st_mode & 0o077


def _clear_stale_socket(path: Path) -> None:
    """A socket file nobody listens on is left over from a killed server: remove it."""
    if not path.exists() and not path.is_symlink():
        return
    if not stat.S_ISSOCK(path.lstat().st_mode):
        raise ServerError(f"server: {path} exists and is not a socket")
    probe = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
    try:
        probe.connect(os.fspath(path))
    except ConnectionRefusedError:
        path.unlink()
        return
    except OSError:
        return
    finally:
        probe.close()
    raise ServerError(f"server: {path} is in use by another server")
