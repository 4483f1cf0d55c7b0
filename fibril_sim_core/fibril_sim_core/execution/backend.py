"""The execution backend a document, the command line or the environment selects.

Precedence: ``--scheduler ADDRESS`` on the command line, then ``FIBRIL_DASK_SCHEDULER`` in the
environment (either selects the ``dask`` backend), then the document's ``execution.backend`` /
``execution.scheduler``; ``local`` when nothing says otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from .._document import JsonValue, Node
from ..schema import Where
from ..errors import FibrilError

BACKENDS = ("local", "dask")
ENVIRONMENT_VARIABLE = "FIBRIL_DASK_SCHEDULER"
_LOCAL = re.compile(r"local:([0-9]+)")
_SCHEMES = ("tcp", "tls", "ws", "wss", "inproc", "ucx")


class ExecutionError(FibrilError):
    """The execution backend cannot be used: a bad address, an unreachable scheduler, workers
    whose library versions differ from this machine's."""


@dataclass(frozen=True)
class Backend:
    """``kind`` is ``local`` or ``dask``; ``scheduler`` (dask only) is ``local:N`` (a cluster
    of N worker processes started on this machine) or a scheduler address."""

    kind: str = "local"
    scheduler: str | None = None

    @property
    def is_dask(self) -> bool:
        return self.kind == "dask"

    def describe(self) -> dict[str, JsonValue]:
        """Provenance: the backend and the scheduler address without credentials."""
        return {"backend": self.kind,
                "scheduler": public_address(self.scheduler) if self.scheduler else None}


def parse_backend(body: Mapping[str, Node], where: Where) -> Backend:
    """``backend`` and ``scheduler`` of an ``execution`` section (both optional)."""
    kind = body.get("backend", "local")
    if kind not in BACKENDS:
        raise where.key("backend").fail(f"expected one of {', '.join(BACKENDS)}, got {kind!r}")
    scheduler = body.get("scheduler")
    if scheduler is not None:
        if kind != "dask":
            raise where.key("scheduler").fail("only the dask backend takes a scheduler; set "
                                              "execution.backend: dask")
        scheduler = check_address(scheduler, where.key("scheduler").fail)
    return Backend(kind, scheduler)


def resolve_backend(document: Backend, cli_scheduler: str | None,
                    environ: Mapping[str, str], default_workers: int = 1) -> Backend:
    """The backend to use: ``--scheduler``, then the environment, then the document; a dask
    backend without an address starts ``local:<default_workers>``."""
    if cli_scheduler is not None:
        return Backend("dask", check_address(cli_scheduler, _flag_error("--scheduler")))
    from_environment = environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if from_environment:
        return Backend("dask", check_address(from_environment,
                                             _flag_error(ENVIRONMENT_VARIABLE)))
    if document.is_dask and document.scheduler is None:
        return Backend("dask", f"local:{max(1, default_workers)}")
    return document


def check_address(value: Node, fail: Callable[[str], Exception]) -> str:
    """``local:N`` (N >= 1) or ``[SCHEME://]HOST:PORT``; ``fail(message)`` makes the error."""
    if not isinstance(value, str) or not value.strip():
        raise fail(f"expected a scheduler address (tcp://HOST:8786 or local:N), got {value!r}")
    text = value.strip()
    local = _LOCAL.fullmatch(text)
    if local:
        if int(local.group(1)) < 1:
            raise fail(f"{text!r}: local:N needs at least one worker")
        return text
    if text.startswith("local"):
        raise fail(f"{text!r}: expected local:N with N the number of worker processes")
    parts = urlsplit(text if "://" in text else f"tcp://{text}")
    if parts.scheme not in _SCHEMES or not parts.hostname:
        raise fail(f"{text!r} is not a scheduler address; expected tcp://HOST:PORT (or tls://, "
                   f"ws://, wss://) or local:N")
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise fail(f"{text!r}: the port is not a number") from None
    return text


def public_address(address: str) -> str:
    """``address`` without user name, password, query or fragment (what provenance keeps)."""
    if "://" not in address:
        return address
    parts = urlsplit(address)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _flag_error(name: str) -> Callable[[str], Exception]:
    return lambda message: ExecutionError(f"{name}: {message}")
