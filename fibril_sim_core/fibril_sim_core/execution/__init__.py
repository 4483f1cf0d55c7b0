"""Where the work of an experiment or a calibration runs: in this process / local worker
processes (``local``, the default) or on a Dask cluster (``dask``).

``backend`` and ``bundle`` never import Dask; ``dask_session`` does, and is imported only when
the ``dask`` backend is chosen (``pip install fibril_sim_core[dask]``)."""

from .backend import (BACKENDS, ENVIRONMENT_VARIABLE, Backend, ExecutionError, parse_backend,
                      public_address, resolve_backend)
from .bundle import Bundle, collect_bundle

__all__ = ["BACKENDS", "ENVIRONMENT_VARIABLE", "Backend", "Bundle", "ExecutionError",
           "collect_bundle", "parse_backend", "public_address", "resolve_backend"]
