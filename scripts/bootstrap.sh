#!/usr/bin/env bash
# Idempotent set-up of the project's virtual environment (.venv/) from the package registries.
#
#   1. python3 (3.11+, as mujoco 4 needs) from PATH creates .venv/ (recreated if its python is
#      broken).
#   2. requirements.txt (every version pinned) is installed; with REQUIREMENTS listing several
#      files, each later file's pins replace the earlier ones' of the same package.
#   3. ./fibril_msgs is built from PyPI's ROS 2 wheels (scikit-build-core) and installed.
#   4. ./fibril_sim_core, ./fibril_calibration, ./fibril_sim_ros are installed editable.
#
# Each step is skipped when a stamp file holds the hash of its inputs; a stamp is written only
# after the step (and a check of its result) succeeded, so an interrupted or failed run is
# redone next time. Failures print ONE line saying what is missing; pip's full output is kept
# in .venv/.fibril-setup/*.log.
#
# Environment: VENV (default <repo>/.venv), PYTHON (default python3 on PATH), REQUIREMENTS
# (default requirements.txt: space-separated files relative to the repo root, e.g.
# "requirements.txt requirements-distro.txt" for the Ubuntu 24.04 versions of `make test-distro`).
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

# A sourced ROS 2 installation next to this venv: they must stay apart (README, "Building in a
# ROS 2 workspace"). Only a warning: `make test` may still be what the user wants.
if [ -n "${ROS_DISTRO:-}${AMENT_PREFIX_PATH:-}" ]; then
  echo "setup: warning: a ROS 2 environment is sourced (ROS_DISTRO=${ROS_DISTRO:-?}): its" \
    "PYTHONPATH/AMENT_PREFIX_PATH reach ${VENV#"$ROOT"/} (PyPI's ROS 2 wheels) and may mix the" \
    "two; run make from a shell without ROS sourced, and never run colcon with" \
    "${VENV#"$ROOT"/} activated (its setuptools >= 80 makes 'colcon build --symlink-install'" \
    "fail with 'option --editable not recognized')" >&2
fi
say "ok ($VENV)"
