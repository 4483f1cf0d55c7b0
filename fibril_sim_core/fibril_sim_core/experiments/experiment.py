"""Parameter experiments (schema 1.0): explicit variants of one canonical model.

An experiment names one canonical manifest, an optional scenario override, a baseline overlay
artifact that declares the tunable parameter ids and their typed targets, explicit variants
(``parameter_values`` replacing declared ids only), generic metrics, assertions and execution
settings. There is never an implicit Cartesian product.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .. import schema as s
from .._document import Node
from ..schema import Where
from ..errors import FibrilError
from ..execution.backend import Backend, parse_backend
from ..trace.query import SELECTOR_KINDS

SCHEMA_MAJOR = 1
SCHEMA_MINORS = (0,)
REDUCERS = ("final", "max_abs", "max_norm", "delta_norm", "duration_above")
METRIC_KINDS = ("signal", "contact_duration", "max_contact_wrench", "event_reached", "rtf")
OPERATORS = ("lt", "le", "gt", "ge", "eq", "ne")
BASELINE_ID = "baseline"


class ExperimentError(FibrilError):
    """The experiment document (or a file it names) is invalid."""


@dataclass(frozen=True)
class Variant:
    id: str
    parameter_values: dict[str, Node]


@dataclass(frozen=True)
class Metric:
    """A generic metric. ``signal`` uses the trace query selector namespace."""

    id: str
    kind: str
    signal: str | None = None
    reduce: str | None = None
    threshold: float | None = None
    contact: str | None = None
    op: str | None = None
    value: float | None = None


@dataclass(frozen=True)
class Assertion:
    metric: str
    op: str
    value: float


@dataclass(frozen=True)
class Execution:
    steps: int
    timeout_seconds: float
    workers: int = 1
    cpu_budget: int = 1
    mujoco_internal_threads: int = 1
    #: None: the seed of the scenario the runs use (``runner._check_start`` decides it).
    seed: int | None = None
    #: ``local`` (``workers`` forked processes) or ``dask`` (each run a task on a cluster).
    backend: Backend = Backend()


@dataclass(frozen=True)
class Experiment:
    path: Path
    sha256: str
    id: str
    manifest: Path
    scenario: Path | None
    baseline_overlay: Path
    variants: tuple[Variant, ...]
    metrics: tuple[Metric, ...]
    assertions: tuple[Assertion, ...]
    execution: Execution

    def metric(self, metric_id: str) -> Metric:
        return next(m for m in self.metrics if m.id == metric_id)


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment document; file names are relative to it."""
    path = Path(path)
    where = Where(str(path), error=ExperimentError)
    doc = s.mapping(s.load_yaml(path, ExperimentError), where)
    s.keys(doc, where, required=("schema_version", "id", "model", "parameters", "execution"),
           optional=("scenario", "variants", "metrics", "assertions", "description"))
    s.version(doc["schema_version"], where.key("schema_version"), major=SCHEMA_MAJOR,
              minors=SCHEMA_MINORS)
    base = path.parent
    model = s.mapping(doc["model"], where.key("model"))
    s.keys(model, where.key("model"), required=("manifest",))
    manifest = _file(base, model["manifest"], where.key("model").key("manifest"))
    scenario = (_file(base, doc["scenario"], where.key("scenario"))
                if doc.get("scenario") is not None else None)
    parameters = s.mapping(doc["parameters"], where.key("parameters"))
    s.keys(parameters, where.key("parameters"), required=("baseline_overlay",))
    baseline = _file(base, parameters["baseline_overlay"],
                     where.key("parameters").key("baseline_overlay"))
    metrics = _metrics(doc.get("metrics", []), where.key("metrics"))
    return Experiment(
        path=path, sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        id=s.string(doc["id"], where.key("id")), manifest=manifest, scenario=scenario,
        baseline_overlay=baseline,
        variants=_variants(doc.get("variants", []), where.key("variants")),
        metrics=metrics,
        assertions=_assertions(doc.get("assertions", []), where.key("assertions"),
                               {m.id for m in metrics}),
        execution=_execution(doc["execution"], where.key("execution")))


def _file(base: Path, raw: Node, where: Where) -> Path:
    return s.existing_file(base, raw, where)


def _variants(raw: Node, where: Where) -> tuple[Variant, ...]:
    variants: list[Variant] = []
    seen = {BASELINE_ID}
    for i, item in enumerate(s.sequence(raw, where)):
        at = where.key(i)
        body = s.mapping(item, at)
        s.keys(body, at, required=("id", "parameter_values"), optional=("description",))
        variant_id = s.string(body["id"], at.key("id"))
        if variant_id in seen:
            raise at.key("id").fail(f"duplicate run id {s.short(variant_id)} ('{BASELINE_ID}' is "
                                    f"reserved for the baseline run)")
        seen.add(variant_id)
        values = dict(s.mapping(body["parameter_values"], at.key("parameter_values")))
        variants.append(Variant(variant_id, values))
    return tuple(variants)


def _metrics(raw: Node, where: Where) -> tuple[Metric, ...]:
    metrics: list[Metric] = []
    seen: set[str] = set()
    for i, item in enumerate(s.sequence(raw, where)):
        at = where.key(i)
        body = s.mapping(item, at)
        kind = body.get("kind")
        if kind not in METRIC_KINDS:
            raise at.key("kind").fail(f"expected one of {', '.join(METRIC_KINDS)}, "
                                      f"got {s.describe(kind)}")
        metric_id = s.string(body.get("id"), at.key("id"))
        if metric_id in seen:
            raise at.key("id").fail(f"duplicate metric id {s.short(metric_id)}")
        seen.add(metric_id)
        if kind == "signal":
            s.keys(body, at, required=("id", "kind", "signal", "reduce"),
                   optional=("threshold",))
            reduce = body["reduce"]
            if reduce not in REDUCERS:
                raise at.key("reduce").fail(f"expected one of {', '.join(REDUCERS)}, "
                                            f"got {s.describe(reduce)}")
            threshold = None
            if reduce == "duration_above":
                if "threshold" not in body:
                    raise at.key("threshold").fail("duration_above needs a threshold")
                threshold = s.number(body["threshold"], at.key("threshold"))
            elif "threshold" in body:
                raise at.key("threshold").fail(f"only duration_above takes a threshold, "
                                               f"not {reduce}")
            metrics.append(Metric(metric_id, kind, signal=_selector(body["signal"],
                                                                     at.key("signal")),
                                  reduce=reduce, threshold=threshold))
        elif kind in ("contact_duration", "max_contact_wrench"):
            s.keys(body, at, required=("id", "kind", "contact"))
            metrics.append(Metric(metric_id, kind,
                                  contact=s.string(body["contact"], at.key("contact"))))
        elif kind == "event_reached":
            s.keys(body, at, required=("id", "kind", "signal", "op", "value"))
            metrics.append(Metric(metric_id, kind, signal=_selector(body["signal"],
                                                                     at.key("signal")),
                                  op=_operator(body["op"], at.key("op")),
                                  value=s.number(body["value"], at.key("value"))))
        else:
            s.keys(body, at, required=("id", "kind"))
            metrics.append(Metric(metric_id, kind))
    return tuple(metrics)


def _selector(raw: Node, where: Where) -> str:
    text = s.string(raw, where)
    kind, _, rest = text.partition(":")
    name, _, field = rest.rpartition(".") if kind in SELECTOR_KINDS and SELECTOR_KINDS[kind] \
        else (rest, "", "")
    if kind not in SELECTOR_KINDS or not name:
        raise where.fail(f"signal {s.short(text)} is not a selector; expected one of body:<name>."
                         f"position|quaternion, joint:<name>.position|velocity, "
                         f"sensor:<name>, actuator:<endpoint>.applied|force, device:<id>")
    if SELECTOR_KINDS[kind] and field not in SELECTOR_KINDS[kind]:
        raise where.fail(f"signal {s.short(text)}: {kind} selectors end in "
                         f"{' or '.join('.' + f for f in SELECTOR_KINDS[kind])}")
    return text


def _operator(raw: Node, where: Where) -> str:
    if raw not in OPERATORS:
        raise where.fail(f"expected one of {', '.join(OPERATORS)}, got {s.describe(raw)}")
    return str(raw)


def _assertions(raw: Node, where: Where, metric_ids: set[str]) -> tuple[Assertion, ...]:
    assertions: list[Assertion] = []
    for i, item in enumerate(s.sequence(raw, where)):
        at = where.key(i)
        body = s.mapping(item, at)
        s.keys(body, at, required=("metric", "op", "value"))
        metric = s.string(body["metric"], at.key("metric"))
        if metric not in metric_ids:
            raise at.key("metric").fail(f"no metric {s.short(metric)}; metrics: "
                                        f"{', '.join(sorted(metric_ids)) or 'none'}")
        assertions.append(Assertion(metric, _operator(body["op"], at.key("op")),
                                    s.number(body["value"], at.key("value"))))
    return tuple(assertions)


def _execution(raw: Node, where: Where) -> Execution:
    body = s.mapping(raw, where)
    # mujoco_internal_threads is required: schema 1.0 makes the thread ownership explicit.
    s.keys(body, where, required=("steps", "timeout_seconds", "mujoco_internal_threads"),
           optional=("workers", "cpu_budget", "seed", "backend", "scheduler"))
    workers = s.integer(body.get("workers", 1), where.key("workers"), minimum=1)
    cpu_budget = s.integer(body.get("cpu_budget", workers), where.key("cpu_budget"), minimum=1)
    if workers > cpu_budget:
        raise where.key("workers").fail(f"workers ({workers}) must not exceed cpu_budget "
                                        f"({cpu_budget})")
    threads = s.integer(body["mujoco_internal_threads"],
                        where.key("mujoco_internal_threads"), minimum=1)
    if threads != 1:
        raise where.key("mujoco_internal_threads").fail(
            f"schema 1.0 requires 1 (variant-level parallelism only), got {threads}")
    return Execution(
        steps=s.integer(body["steps"], where.key("steps"), minimum=1),
        timeout_seconds=s.number(body["timeout_seconds"], where.key("timeout_seconds"),
                                 positive=True),
        workers=workers, cpu_budget=cpu_budget, mujoco_internal_threads=threads,
        seed=(s.integer(body["seed"], where.key("seed"), minimum=0) if "seed" in body
              else None),
        backend=parse_backend(body, where))
