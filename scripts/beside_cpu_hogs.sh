#!/usr/bin/env bash
# Usage: scripts/beside_cpu_hogs.sh N COMMAND...
# Runs COMMAND with N CPU-burning processes beside it (a busy laptop, a shared CI runner) and
# returns COMMAND's exit status; the hogs are stopped however COMMAND ends.
set -uo pipefail
count="$1"; shift
hogs=()
stop_hogs() { [ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null; }
trap stop_hogs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for _ in $(seq "$count"); do
  sh -c 'while :; do :; done' &
  hogs+=("$!")
done
echo "beside $count CPU hogs (pids ${hogs[*]}): $*" >&2
"$@"
