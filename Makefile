# Fibril Sim developer entry points. Everything runs from .venv/, set up from the package
# registries by scripts/bootstrap.sh (idempotent: a second `make setup` changes nothing).
#
#   make setup   create/refresh .venv/ (pinned requirements, fibril_msgs, editable packages
#                with their ament index for `ros2 run` / `ros2 launch`, and the ROS 2 tools:
#                ros2, launch, launch_testing, tf2_msgs, simulation_interfaces ... built from
#                ../shared/vendor/ros2 when it is there, FIBRIL_ROS_VENDOR=PATH to point elsewhere)
#   make test    setup, then the whole pytest suite but the `extended` tests (long duplicates of
#                cheaper tests, run by make test-busy) (PYTEST_ARGS="-k smoke" to narrow it)
#   make test-distro  the whole suite again in .venv-distro/ (Python 3.12 when available):
#                requirements.txt with the Ubuntu 24.04 versions of numpy, scipy and PyYAML
#                (requirements-distro.txt) over it, the oldest versions the packages declare
#                (set up like .venv/, idempotent)
#   make test-busy  the `ros or slow` tests again beside two CPU-burning processes (CI runs it
#                after make test), so that no test depends on an idle machine; the `extended`
#                tests (all slow) run here
#   make docs    the documentation (Sphinx + MyST, docs/requirements.txt installed into .venv/
#                when Sphinx is missing) into docs/_build/html, warnings as errors; the Reference
#                pages are generated from the code
#   make demo    setup, then a 2 s drivetrain run traced to .demo/trace and a query of it, the
#                wheel-damping experiment and the drivetrain calibration (results, HTML reports
#                and the fitted MJCF in .demo/; open .demo/calibration-report/index.html),
#                then the SIL demo: the ROS 2 simulation node and the example controller as
#                processes, 3 s of sim time in real time and in sync mode
#   make clean   remove .venv/, .demo/ and build/test leftovers

SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
VENV := .venv
PY := $(VENV)/bin/python
DISTRO_VENV := .venv-distro
DISTRO_REQUIREMENTS := requirements.txt requirements-distro.txt
# Ubuntu 24.04's Python is 3.12; python3 when no python3.12 runs here (setup prints which).
DISTRO_PYTHON ?= $(shell python3.12 -c '' > /dev/null 2>&1 && echo python3.12 || echo python3)
PYTEST_ARGS ?=
# Test files run in this many worker processes (pytest-xdist; 0: in pytest's own process).
# Each file stays in one worker, so its module fixtures start once.
PYTEST_WORKERS ?= 2

# Two processes on this machine talk over Fast DDS shared memory only: no network traffic.
export FASTDDS_BUILTIN_TRANSPORTS := SHM

.PHONY: setup test test-busy test-distro docs demo clean

setup:
	@VENV="$(CURDIR)/$(VENV)" scripts/bootstrap.sh

# pytest exits 5 when it collected no tests: that is a failure here, like any non-zero code.
# `extended` tests (slow-marked) are left to make test-busy: a cheaper test covers each here.
pytest = rc=0; $(1)/bin/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile \
	-m "not extended" $(PYTEST_ARGS) \
	|| rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests" >&2; fi; \
	exit $$rc

test: setup
	@$(call pytest,$(VENV))

test-busy: setup
	@scripts/beside_cpu_hogs.sh 2 $(VENV)/bin/python -m pytest -n $(PYTEST_WORKERS) \
	  --dist loadfile -m "ros or slow" $(PYTEST_ARGS)

test-distro:
	@VENV="$(CURDIR)/$(DISTRO_VENV)" REQUIREMENTS="$(DISTRO_REQUIREMENTS)" PYTHON="$(DISTRO_PYTHON)" \
	  scripts/bootstrap.sh
	@$(call pytest,$(DISTRO_VENV))

# Not after setup: the docs build needs the venv's packages only (CI runs it after make test).
docs:
	@$(PY) -c 'import sphinx, myst_parser' 2>/dev/null || \
	  $(PY) -m pip install --quiet --no-deps -r docs/requirements.txt
	$(PY) -m sphinx -W --keep-going -b html -q docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

demo: setup
	@rm -rf .demo && mkdir -p .demo
	$(VENV)/bin/fibril_sim run config/examples/drivetrain/simulation.yaml --duration 2.0 --trace .demo/trace
	$(VENV)/bin/fibril_sim trace query .demo/trace body:chassis.position --format csv | tail -5
	$(VENV)/bin/fibril_sim experiment run config/examples/drivetrain/wheel-damping-study.yaml \
	  --output .demo/experiment.json --traces .demo/experiment.traces \
	  --report .demo/experiment-report
	$(VENV)/bin/fibril_sim calibrate config/examples/drivetrain/calibration.yaml --quiet \
	  --output .demo/calibration.json --output-overlay .demo/drivetrain-fit.json \
	  --report .demo/calibration-report --export-mjcf .demo/drivetrain-fitted.xml
	$(PY) -m fibril_sim_ros.examples.sil_demo --duration 3

clean:
	rm -rf $(VENV) $(DISTRO_VENV) .demo .pytest_cache docs/_build docs/reference/generated
	rm -rf fibril_msgs/build fibril_sim_core/build fibril_calibration/build fibril_sim_ros/build
	find . -path ./.git -prune -o \( -name __pycache__ -o -name '*.egg-info' \) -type d -print0 \
	  | xargs -0 rm -rf
