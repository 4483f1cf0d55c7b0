#!/usr/bin/env bash
# Idempotent set-up of the project's virtual environment (.venv/) from the package registries.
#
#   1. python3 (3.11+, as mujoco 4 needs) from PATH creates .venv/ (recreated if its python is
#      broken).
#   2. requirements.txt (every version pinned) is installed; with REQUIREMENTS listing several
#      files, each later file's pins replace the earlier ones' of the same package.
#   3. ./fibril_msgs is built from PyPI's ROS 2 wheels (scikit-build-core) and installed.
#   4. ./fibril_sim_core, ./fibril_calibration, ./fibril_sim_ros are installed editable, and
#      scripts/ament_layout.py links their ament index entries, share/ files (package.xml,
#      launch files, configurations) and lib/<pkg>/ executables into the venv prefix and puts
#      the prefix on AMENT_PREFIX_PATH (a .pth), for `ros2 run` / `ros2 launch`.
#   5. The ROS 2 tools (launch, launch_ros, launch_testing, launch_testing_ros, the ros2 command,
#      rosidl_runtime_py) and the interface packages composition_interfaces, tf2_msgs and
#      simulation_interfaces, from their unmodified upstream sources in ../shared/vendor/ros2
#      (or FIBRIL_ROS_VENDOR=PATH), each copied to a scratch folder first (that folder may be
#      read-only): the interfaces built like fibril_msgs (scripts/ros_interfaces/), the
#      pure-Python packages with `pip install --no-deps` (their PyPI dependencies are pinned in
#      requirements.txt). Without the folder they are not installed (one line says so) and the
#      tests that need them skip.
#
# Each step is skipped when a stamp file holds the hash of its inputs; a stamp is written only
# after the step (and a check of its result) succeeded, so an interrupted or failed run is
# redone next time. Failures print ONE line saying what is missing; pip's full output is kept
# in .venv/.fibril-setup/*.log.
#
# Environment: VENV (default <repo>/.venv), PYTHON (default python3 on PATH), REQUIREMENTS
# (default requirements.txt: space-separated files relative to the repo root, e.g.
# "requirements.txt requirements-distro.txt" for the Ubuntu 24.04 versions of `make test-distro`),
# FIBRIL_ROS_VENDOR (default <repo>/../shared/vendor/ros2: the ROS 2 tools' sources, step 5).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
STATE="$VENV/.fibril-setup"
PYTHON="${PYTHON:-python3}"
read -r -a REQ_FILES <<< "${REQUIREMENTS:-requirements.txt}"
PIP_FLAGS=(--disable-pip-version-check --no-input)

die() { echo "error: setup: $*" >&2; exit 1; }
say() { echo "setup: $*"; }

# Hash of files (paths relative to ROOT; directories are walked, sorted) plus extra strings.
hash_inputs() {
  (
    cd "$ROOT"
    for item in "$@"; do
      if [ -d "$item" ]; then
        find "$item" -type f \
          -not -path '*/__pycache__/*' -not -path '*/build/*' -not -name '*.egg-info' \
          -not -path '*.egg-info/*' | LC_ALL=C sort
      elif [ -e "$item" ]; then
        echo "$item"
      else
        echo "missing:$item"
      fi
    done | while read -r f; do
      case "$f" in
        missing:*) echo "$f" ;;
        *) printf '%s  ' "$f"; sha256sum < "$f" | cut -d' ' -f1 ;;
      esac
    done
  ) | sha256sum | cut -d' ' -f1
}

# Hash of every file under an absolute directory (names relative to it, and contents).
hash_tree() {
  (cd "$1" && find . -type f -not -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z \
     | xargs -0 -r sha256sum) | sha256sum | cut -d' ' -f1
}

stamp_ok() { [ -f "$STATE/$1.stamp" ] && [ "$(cat "$STATE/$1.stamp")" = "$2" ]; }
stamp_write() { echo "$2" > "$STATE/$1.stamp"; }

# Run `pip install ARGS`, output to a log; on failure print one line naming what went wrong.
run_pip() {
  local what="$1" log="$STATE/$2.log" reason=""; shift 2
  if ! "$VENV/bin/python" -m pip "${PIP_FLAGS[@]}" install --progress-bar off "$@" > "$log" 2>&1; then
    local net='NewConnectionError|Connection refused|Read timed out|ConnectTimeout|HTTPError|Network is unreachable|Temporary failure in name resolution|ProxyError|SSLError'
    if grep -q -E "$net" "$log"; then
      reason="cannot download from the package index ($(grep -o -m1 -E "$net" "$log" | head -n 1))"
    else
      local pattern
      for pattern in 'No matching distribution found for' 'CMake Error' 'ERROR: |error: '; do
        reason="$(grep -m1 -E "$pattern" "$log" | sed -E 's/^[[:space:]]*(ERROR: |error: )?//' | cut -c1-200 || true)"
        [ -z "$reason" ] || break
      done
    fi
    [ -n "$reason" ] || reason="$(grep -v -e 'is ignored' -e '^[[:space:]]*$' "$log" | tail -n 1 || true)"
    die "$what failed: ${reason:-see log}  (full log: ${log#"$ROOT"/})"
  fi
}

# --- 1. interpreter and venv ---------------------------------------------------------------
command -v "$PYTHON" > /dev/null 2>&1 \
  || die "Python 3.11+ is required but '$PYTHON' was not found on PATH"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2> /dev/null \
  || die "Python 3.11+ is required but '$PYTHON' is $("$PYTHON" -V 2>&1 || echo 'not runnable')"
"$PYTHON" -c 'import venv, ensurepip' 2> /dev/null \
  || die "'$PYTHON' lacks the venv/ensurepip modules (Debian: apt-get install python3-venv)"
PY_ID="$("$PYTHON" -c 'import sys, platform; print(sys.version.split()[0], platform.machine())')"

if [ -e "$VENV" ]; then
  if ! "$VENV/bin/python" -c 'import sys, pip' > /dev/null 2>&1 \
     || [ "$(cat "$STATE/python.id" 2> /dev/null)" != "$PY_ID" ]; then
    say "recreating $VENV (missing/broken interpreter or Python changed)"
    rm -rf "$VENV"
  fi
fi
if [ ! -e "$VENV" ]; then
  say "creating $VENV with $PYTHON ($PY_ID)"
  "$PYTHON" -m venv "$VENV" || die "'$PYTHON -m venv $VENV' failed"
  mkdir -p "$STATE"
  echo "$PY_ID" > "$STATE/python.id"
fi
mkdir -p "$STATE"
# One set-up of a venv at a time: two at once would install over each other and build in the
# same scratch folder (step 5). A second `make setup` waits here, then finds its work done.
if command -v flock > /dev/null 2>&1; then
  exec 9> "$STATE/setup.lock"
  flock -n 9 || { say "waiting for another set-up of $VENV to finish ..."; flock 9; }
fi

# --- 2. pinned requirements ------------------------------------------------------------------
# The files merged into one (later pins of a package replace earlier ones, names compared as
# pip does), so an override file lists only what differs from requirements.txt.
for f in "${REQ_FILES[@]}"; do [ -f "$ROOT/$f" ] || die "requirements file '$f' not found in $ROOT"; done
REQ_HASH="$(hash_inputs "${REQ_FILES[@]}"; echo "$PY_ID")"
REQ_HASH="$(echo "$REQ_HASH" | sha256sum | cut -d' ' -f1)"
if stamp_ok requirements "$REQ_HASH"; then
  :
else
  say "installing pinned requirements (${REQ_FILES[*]}) ..."; t0=$SECONDS
  rm -f "$STATE"/*.stamp
  (cd "$ROOT" && awk '
      { line = $0; sub(/[[:space:]]*#.*/, "", line); gsub(/^[[:space:]]+|[[:space:]]+$/, "", line) }
      line == "" { next }
      { name = tolower(line); sub(/[[:space:]]*[=<>!~;\[].*/, "", name); gsub(/[-_.]+/, "-", name)
        if (!(name in pin)) order[++n] = name
        pin[name] = line }
      END { for (i = 1; i <= n; i++) print pin[order[i]] }' "${REQ_FILES[@]}") \
    > "$STATE/requirements.txt"
  run_pip "installing ${REQ_FILES[*]}" requirements -r "$STATE/requirements.txt"
  stamp_write requirements "$REQ_HASH"
  say "  requirements installed in $((SECONDS - t0)) s"
fi

# --- 3. fibril_msgs ----------------------------------------------------------------------------
MSGS_HASH="$( (echo "$REQ_HASH"; hash_inputs fibril_msgs) | sha256sum | cut -d' ' -f1)"
if stamp_ok fibril_msgs "$MSGS_HASH"; then
  :
else
  say "building fibril_msgs from the ROS 2 wheels (about 20-45 s) ..."; t0=$SECONDS
  # No build isolation: the build requirements are pinned in requirements.txt and already in
  # the venv, so the generated code links against exactly the libraries it runs with (and the
  # build is ~5 s faster than with an isolated build environment).
  run_pip "building fibril_msgs" fibril_msgs --no-build-isolation --no-deps \
    --force-reinstall "$ROOT/fibril_msgs"
  "$VENV/bin/python" -c 'from fibril_msgs.msg import DeviceSample; from fibril_msgs.srv import Step' \
    > "$STATE/fibril_msgs-check.log" 2>&1 \
    || die "fibril_msgs was built but cannot be imported (see ${STATE#"$ROOT"/}/fibril_msgs-check.log)"
  stamp_write fibril_msgs "$MSGS_HASH"
  say "  fibril_msgs built and installed in $((SECONDS - t0)) s"
fi

# --- 4. the Python packages, editable ----------------------------------------------------------
PKGS=(fibril_sim_core fibril_calibration fibril_sim_ros)
PKG_INPUTS=()
for pkg in "${PKGS[@]}"; do
  PKG_INPUTS+=("$pkg/setup.py" "$pkg/setup.cfg" "$pkg/pyproject.toml" "$pkg/package.xml")
done
PKG_INPUTS+=(fibril_sim_ros/fibril_sim_ros/_publish_batch.c)  # compiled at install
PY_HASH="$( (echo "$REQ_HASH"; hash_inputs "${PKG_INPUTS[@]}") | sha256sum | cut -d' ' -f1)"
if stamp_ok python_packages "$PY_HASH"; then
  :
else
  say "installing ${PKGS[*]} (editable) ..."; t0=$SECONDS
  EDITABLE=()
  for pkg in "${PKGS[@]}"; do EDITABLE+=(-e "$ROOT/$pkg"); done
  # editable_mode=compat: a .pth puts each package folder on sys.path (like colcon's
  # --symlink-install), so modules and subpackages added later import without a reinstall,
  # and running from the repo root cannot shadow the package with the outer folder.
  run_pip "installing ${PKGS[*]}" python_packages --no-build-isolation --no-deps \
    --config-settings editable_mode=compat "${EDITABLE[@]}"
  stamp_write python_packages "$PY_HASH"
  say "  installed in $((SECONDS - t0)) s"
fi

# --- 4b. ament layout of the editable packages ---------------------------------------------------
# Links, not copies: re-laid when a setup.py changes or a launch/config file comes or goes.
LAYOUT_HASH="$( (echo "$PY_HASH"; hash_inputs scripts/ament_layout.py;
  cd "$ROOT" && find config launch -type f | LC_ALL=C sort) | sha256sum | cut -d' ' -f1)"
if ! stamp_ok ament_layout "$LAYOUT_HASH"; then
  "$VENV/bin/python" "$ROOT/scripts/ament_layout.py" "$VENV" "${PKGS[@]/#/$ROOT/}" \
    > "$STATE/ament_layout.log" 2>&1 \
    || die "laying out the ament index of ${PKGS[*]} failed: $(grep -m1 error: "$STATE/ament_layout.log" || tail -n 1 "$STATE/ament_layout.log")"
  stamp_write ament_layout "$LAYOUT_HASH"
fi

# --- 5. the ROS 2 tools from the vendored upstream sources ---------------------------------------
ROS_VENDOR="${FIBRIL_ROS_VENDOR:-$ROOT/../shared/vendor/ros2}"
# Interface packages (ament_cmake + rosidl), in dependency order: launch_ros imports
# composition_interfaces when it is imported.
ROS_INTERFACES=(rcl_interfaces/composition_interfaces geometry2/tf2_msgs simulation_interfaces)
ROS_PYTHON=(launch/launch launch/launch_xml launch/launch_yaml launch/launch_testing
  launch/launch_pytest launch_ros/launch_ros launch_ros/launch_testing_ros launch_ros/ros2launch
  ros2cli/ros2cli ros2cli/ros2run ros2cli/ros2pkg ros2cli/ros2topic ros2cli/ros2service
  ros2cli/ros2param ros2cli/ros2node ros2cli/ros2interface rosidl_runtime_py)
SCRATCH="$STATE/ros-src"

# Copy vendored package folders (relative to ROS_VENDOR) into $SCRATCH, writable.
copy_vendored() {
  local rel
  rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
  for rel in "$@"; do
    [ -f "$ROS_VENDOR/$rel/package.xml" ] || die "$ROS_VENDOR/$rel/package.xml not found (FIBRIL_ROS_VENDOR must hold the vendored ROS 2 sources, see its README)"
    cp -R "$ROS_VENDOR/$rel" "$SCRATCH/"
  done
  chmod -R u+w "$SCRATCH"
}

if [ -d "$ROS_VENDOR" ]; then
  ROS_VENDOR="$(cd "$ROS_VENDOR" && pwd)"
  # 5a. interface packages, built from a scratch copy with the generic pyproject template.
  IFACE_HASH="$( (echo "$REQ_HASH"; for rel in "${ROS_INTERFACES[@]}"; do echo "$rel";
    hash_tree "$ROS_VENDOR/$rel"; done; hash_inputs scripts/ros_interfaces fibril_msgs/cmake) \
    | sha256sum | cut -d' ' -f1)"
  if ! stamp_ok ros_interfaces "$IFACE_HASH"; then
    say "building ${ROS_INTERFACES[*]##*/} from $ROS_VENDOR (about 2-4 min) ..."; t0=$SECONDS
    copy_vendored "${ROS_INTERFACES[@]}"
    IFACE_DIRS=()
    for rel in "${ROS_INTERFACES[@]}"; do
      name="${rel##*/}"
      version="$(sed -n 's:.*<version>\(.*\)</version>.*:\1:p' "$SCRATCH/$name/package.xml" | head -n 1)"
      sed -e "s|@NAME@|$name|g" -e "s|@DIST@|ros-${name//_/-}|g" -e "s|@VERSION@|$version|g" \
        -e "s|@PROJECT_INCLUDE@|$ROOT/fibril_msgs/cmake/pip_wheel_prefix.cmake|g" \
        "$ROOT/scripts/ros_interfaces/pyproject.toml.in" > "$SCRATCH/$name/pyproject.toml"
      IFACE_DIRS+=("$SCRATCH/$name")
    done
    run_pip "building ${ROS_INTERFACES[*]##*/}" ros_interfaces --no-build-isolation --no-deps \
      --force-reinstall "${IFACE_DIRS[@]}"
    "$VENV/bin/python" -c 'from composition_interfaces.srv import LoadNode
from tf2_msgs.msg import TFMessage
from simulation_interfaces.srv import GetSimulatorFeatures
from simulation_interfaces.action import SimulateSteps' > "$STATE/ros_interfaces-check.log" 2>&1 \
      || die "the ROS 2 interface packages were built but cannot be imported (see ${STATE#"$ROOT"/}/ros_interfaces-check.log)"
    rm -rf "$SCRATCH"
    stamp_write ros_interfaces "$IFACE_HASH"
    say "  built and installed in $((SECONDS - t0)) s"
  fi
  # 5b. the pure-Python packages (setup.py, no compiled code), from a scratch copy.
  TOOLS_HASH="$( (echo "$REQ_HASH"; for rel in "${ROS_PYTHON[@]}"; do echo "$rel";
    hash_tree "$ROS_VENDOR/$rel"; done) | sha256sum | cut -d' ' -f1)"
  if ! stamp_ok ros_tools "$TOOLS_HASH"; then
    say "installing the ROS 2 tools (launch, launch_testing, ros2 ...) from $ROS_VENDOR ..."; t0=$SECONDS
    copy_vendored "${ROS_PYTHON[@]}"
    TOOL_DIRS=()
    for rel in "${ROS_PYTHON[@]}"; do TOOL_DIRS+=("$SCRATCH/${rel##*/}"); done
    run_pip "installing the ROS 2 tools" ros_tools --no-build-isolation --no-deps \
      --force-reinstall "${TOOL_DIRS[@]}"
    rm -rf "$SCRATCH"
    (cd / && "$VENV/bin/python" -c 'import launch, launch_ros, launch_testing, launch_testing_ros, ros2cli, rosidl_runtime_py' \
      && "$VENV/bin/ros2" --help) > "$STATE/ros_tools-check.log" 2>&1 \
      || die "the ROS 2 tools were installed but '${VENV#"$ROOT"/}/bin/ros2 --help' fails (see ${STATE#"$ROOT"/}/ros_tools-check.log)"
    stamp_write ros_tools "$TOOLS_HASH"
    say "  installed in $((SECONDS - t0)) s"
  fi
elif [ -n "${ROS_DISTRO:-}" ]; then
  say "ROS 2 tools: not installed in ${VENV#"$ROOT"/} (no $ROS_VENDOR); the sourced ROS 2 $ROS_DISTRO installation's are used"
else
  say "ROS 2 tools (ros2, launch, launch_testing) not installed: no $ROS_VENDOR (FIBRIL_ROS_VENDOR=PATH names their vendored sources); the tests that need them skip"
fi

# A sourced ROS 2 installation next to this venv: they must stay apart (README, "Building in a
# ROS 2 workspace"). Only a warning: `make test` may still be what the user wants.
# (AMENT_PREFIX_PATH naming only this venv is the venv's own .pth, e.g. when a test runs make.)
if [ -n "${ROS_DISTRO:-}" ] || { [ -n "${AMENT_PREFIX_PATH:-}" ] && [ "${AMENT_PREFIX_PATH:-}" != "$VENV" ]; }; then
  echo "setup: warning: a ROS 2 environment is sourced (ROS_DISTRO=${ROS_DISTRO:-?}): its" \
    "PYTHONPATH/AMENT_PREFIX_PATH reach ${VENV#"$ROOT"/} (PyPI's ROS 2 wheels) and may mix the" \
    "two; run make from a shell without ROS sourced, and never run colcon with" \
    "${VENV#"$ROOT"/} activated (its setuptools >= 80 makes 'colcon build --symlink-install'" \
    "fail with 'option --editable not recognized')" >&2
fi
say "ok ($VENV)"
