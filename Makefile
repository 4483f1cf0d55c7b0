# Fibril Sim developer entry points. Everything runs from .venv/, set up from the package
# registries by scripts/bootstrap.sh (idempotent: a second `make setup` changes nothing).
#
#   make setup   create/refresh .venv/ (pinned requirements, fibril_msgs, editable packages
#                with their ament index for `ros2 run` / `ros2 launch`, and the ROS 2 tools:
#                ros2, launch, launch_testing, tf2_msgs, simulation_interfaces ... built from
#                ../shared/vendor/ros2 when it is there, FIBRIL_ROS_VENDOR=PATH to point elsewhere)
#   make test    setup, then the whole pytest suite (PYTEST_ARGS="-k smoke" to narrow it)
#   make test-distro  the whole suite again in .venv-distro/ (Python 3.12 when available):
#                requirements.txt with the Ubuntu 24.04 versions of numpy, scipy and PyYAML
#                (requirements-distro.txt) over it, the oldest versions the packages declare
#                (set up like .venv/, idempotent)
#   make test-busy  the `ros or slow` tests again beside two CPU-burning processes (CI runs it
#                after make test), so that no test depends on an idle machine
#   make demo    setup, then a 2 s drivetrain run traced to .demo/trace and a query of it, the
#                wheel-damping experiment and the drivetrain calibration (results in .demo/),
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

# Two processes on this machine talk over Fast DDS shared memory only: no network traffic.
export FASTDDS_BUILTIN_TRANSPORTS := SHM

.PHONY: setup test test-busy test-distro demo clean

setup:
	@VENV="$(CURDIR)/$(VENV)" scripts/bootstrap.sh

# pytest exits 5 when it collected no tests: that is a failure here, like any non-zero code.
pytest = rc=0; $(1)/bin/python -m pytest $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests" >&2; fi; \
	exit $$rc

test: setup
	@$(call pytest,$(VENV))

test-busy: setup
	@scripts/beside_cpu_hogs.sh 2 $(VENV)/bin/python -m pytest -m "ros or slow" $(PYTEST_ARGS)

test-distro:
	@VENV="$(CURDIR)/$(DISTRO_VENV)" REQUIREMENTS="$(DISTRO_REQUIREMENTS)" PYTHON="$(DISTRO_PYTHON)" \
	  scripts/bootstrap.sh
	@$(call pytest,$(DISTRO_VENV))

demo: setup
	@rm -rf .demo && mkdir -p .demo
	$(VENV)/bin/fibril_sim run config/examples/drivetrain/simulation.yaml --duration 2.0 --trace .demo/trace
	$(VENV)/bin/fibril_sim trace query .demo/trace body:chassis.position --format csv | tail -5
	$(VENV)/bin/fibril_sim experiment run config/examples/drivetrain/wheel-damping-study.yaml \
	  --output .demo/experiment.json --traces .demo/experiment.traces
	$(VENV)/bin/fibril_sim calibrate config/examples/drivetrain/calibration.yaml --quiet \
	  --output .demo/calibration.json --output-overlay .demo/drivetrain-fit.json
	$(PY) -m fibril_sim_ros.examples.sil_demo --duration 3

clean:
	rm -rf $(VENV) $(DISTRO_VENV) .demo .pytest_cache
	rm -rf fibril_msgs/build fibril_sim_core/build fibril_calibration/build fibril_sim_ros/build
	find . -path ./.git -prune -o \( -name __pycache__ -o -name '*.egg-info' \) -type d -print0 \
	  | xargs -0 rm -rf
