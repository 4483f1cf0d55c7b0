"""Lazy package exports: a package ``__init__`` names its public API without importing it.

A command line imports a package to reach one small module (``fibril_sim --help`` loads the
``calibrate`` parser through ``fibril_calibration``); eager re-exports would load MuJoCo,
NumPy, SciPy and rosbags first. Each name is imported on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str],
                 namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose ``exports`` map a public name to the
    relative module that defines it; a name, once imported, is kept in ``namespace``."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
