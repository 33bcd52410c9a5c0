#!/usr/bin/env bash
# Device side (a lent GPU node, after .device/install-vllm.sh): several commands at once, one lane each, each
# in its own copy of the working folder (engine hosts are per folder), on its own GPU (CUDA_VISIBLE_DEVICES
# and SPECSWEEP_GPU_IDS) and its own CPUs (taskset: an engine start compiling in one lane must not slow the
# scheduler of a timed pass in the other), detached from the call (setsid), so a lane longer than one call's
# time limit goes on through the next calls of the same warm machine.
#
#   bash workflow/scripts/device-lanes.sh start GPU CPUS COMMAND [GPU CPUS COMMAND ...]
#   bash workflow/scripts/device-lanes.sh wait BUDGET_S RUN...
#
# `start` launches the lanes and returns; `wait` waits up to BUDGET_S seconds for all of them, then copies
# what each lane has of results/RUN, logs/RUN and benchmarks/RUN back here and packs them, with the lanes'
# logs, into $OUT/results.tar.gz (also when lanes are still running: a later `wait` brings the rest). It exits
# 0 when every lane has ended (each lane's exit status is in its log's last line), 3 while any still runs.
set -uo pipefail
root=/tmp/specsweep-lanes
here=$PWD
# shellcheck source=/dev/null
[ -f /tmp/site/env.sh ] && . /tmp/site/env.sh
case ${1:-} in
  start)
    shift
    if ! python3 -c "import snakemake" 2>/dev/null; then
      bash workflow/scripts/device-install-workflow.sh .device/snakemake-wheels >/dev/null || exit 1
    fi
    if [ $# -eq 0 ] || [ $(($# % 3)) -ne 0 ]; then
      echo "device-lanes: start wants GPU CPUS COMMAND triples" >&2
      exit 2
    fi
    rm -rf "$root" && mkdir -p "$root"
    i=0
    while [ $# -gt 0 ]; do
      gpu=$1 cpus=$2 cmd=$3
      shift 3
      i=$((i + 1))
      dir=$root/lane$i
      mkdir -p "$dir" && cp -a "$here/." "$dir/" && rm -rf "$dir/.snakemake/locks"
      # shellcheck disable=SC2016  # expanded by the lane's own shell
      setsid env -u OUT CUDA_VISIBLE_DEVICES="$gpu" SPECSWEEP_GPU_IDS="$gpu" bash -c \
        'cd "$1" && taskset -c "$2" bash -c "$3"; rc=$?; echo "lane exit $rc"; echo "$rc" >lane.rc' \
        lane "$dir" "$cpus" "$cmd" >"$dir/lane.log" 2>&1 </dev/null &
      echo "lane $i: GPU $gpu, CPUs $cpus: $cmd"
    done
    ;;
  wait)
    budget=$2
    shift 2
    end=$((SECONDS + budget))
    while [ $SECONDS -lt $end ]; do
      running=0
      for dir in "$root"/lane*; do [ -f "$dir/lane.rc" ] || running=1; done
      [ $running -eq 0 ] && break
      sleep 5
    done
    running=0
    for dir in "$root"/lane*; do
      lane=$(basename "$dir")
      [ -f "$dir/lane.rc" ] || running=1
      echo "== $lane: $([ -f "$dir/lane.rc" ] && echo "ended, exit $(cat "$dir/lane.rc")" || echo running)"
      tail -n 4 "$dir/lane.log"
      for run in "$@"; do
        for sub in "results/$run" "logs/$run" "benchmarks/$run"; do
          # -u: a file here newer than the lane's (measured by another lane) stays
          [ -d "$dir/$sub" ] && mkdir -p "$sub" && cp -a -u "$dir/$sub/." "$sub/"
        done
        mkdir -p "logs/$run" && cp "$dir/lane.log" "logs/$run/device-$lane.log"
      done
    done
    if [ -n "${OUT:-}" ]; then
      dirs=()
      for run in "$@"; do dirs+=("results/$run" "logs/$run" "benchmarks/$run"); done
      tar czf "$OUT/results.tar.gz" --ignore-failed-read "${dirs[@]}" 2>/dev/null
    fi
    exit $((running * 3))
    ;;
  *)
    echo "usage: device-lanes.sh start GPU CPUS COMMAND... | wait BUDGET_S RUN..." >&2
    exit 2
    ;;
esac
