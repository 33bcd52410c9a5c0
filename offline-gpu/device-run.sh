#!/usr/bin/env bash
# An offline GPU machine (README.md here; vLLM already installed in /tmp/site): installs Snakemake from carried
# wheels, reassembles the SmolLM2 GGUF from stashed pieces, then runs Snakemake itself with the arguments given,
# stopping it before the call's time limit (a later call resumes by existence), and packs the run's results,
# logs and benchmarks into $OUT/results.tar.gz.
#
#   bash offline-gpu/device-run.sh BUDGET_S RUN SNAKEMAKE_ARG...           one call: run, stop at BUDGET_S, pack
#   bash offline-gpu/device-run.sh --start BUDGET_S RUN SNAKEMAKE_ARG...   start Snakemake in a session of its
#                                                                           own and return (it outlives the call)
#   bash offline-gpu/device-run.sh --wait WAIT_S RUN     wait up to WAIT_S for the started run, pack what exists;
#                                                         exits with Snakemake's status once it has ended
#   bash offline-gpu/device-run.sh --stop RUN            interrupt the started run (SIGINT), pack, stop engines
#
# --start/--wait is for machines whose calls have a time limit but which keep running what a call left in a
# session of its own while they stay held: one Snakemake run then spans many calls, so no engine start is cut
# short at a call's limit and Snakemake starts once. A started run works in a copy of the working tree of its
# own ($SPECSWEEP_DETACHED_DIR/RUN/tree, made by --start; --wait and --stop work there too), so that a machine
# which mirrors the sending side's tree into the checkout before each call cannot delete the cells it writes
# between calls; a later --start of the same RUN keeps the cells, logs and benchmarks the last one made there.
# Environment: SPECSWEEP_SITE_ENV (the file that puts vLLM on PYTHONPATH, default /tmp/site/env.sh),
# SPECSWEEP_DETACHED_DIR (where a started run keeps its pid, log and exit status, default
# /tmp/specsweep-detached), SPECSWEEP_RESUME (below), OUT (where results.tar.gz goes).
set -uo pipefail
mode=run
case ${1:-} in
  --start | --wait | --stop) mode=${1#--} && shift ;;
esac
case $mode in
  run | start) [ "$#" -ge 2 ] || { echo "usage: $0 [--start] BUDGET_S RUN SNAKEMAKE_ARG..." >&2; exit 2; }
    budget=$1 run=$2 && shift 2 ;;
  wait) [ "$#" -eq 2 ] || { echo "usage: $0 --wait WAIT_S RUN" >&2; exit 2; }
    wait_s=$1 run=$2 ;;
  stop) [ "$#" -eq 1 ] || { echo "usage: $0 --stop RUN" >&2; exit 2; }
    run=$1 ;;
esac
state=${SPECSWEEP_DETACHED_DIR:-/tmp/specsweep-detached}/$run
tree=$state/tree repo=$PWD
case ${SPECSWEEP_RESUME:-/} in /*) ;; *) SPECSWEEP_RESUME=$repo/$SPECSWEEP_RESUME ;; esac
site_env=${SPECSWEEP_SITE_ENV:-/tmp/site/env.sh}
# shellcheck source=/dev/null
. "$site_env" || { echo "cannot read $site_env (SPECSWEEP_SITE_ENV): is vLLM installed?"; exit 1; }
export SPECSWEEP_ENGINE_IDLE_S=${SPECSWEEP_ENGINE_IDLE_S:-60}

# the functions below work in the current folder: the checkout, or a started run's own tree
pack() {
  if [ -n "${OUT:-}" ]; then
    tar czf "$OUT/results.tar.gz" --ignore-failed-read "results/$run" "logs/$run" "benchmarks/$run" "figures/$run" \
      2>/dev/null
    ls -la "$OUT"
  fi
}

stop_engines() {
  # a host still measuring when the budget ran out is not waited for
  SPECSWEEP_ENGINE_START_TIMEOUT_S=10 python3 -m specsweep.cli engines --stop || true
}

cells() {
  find "results/$run/cells" -name 'r*.json' 2>/dev/null | wc -l
}

# a run that has ended: its exit status, the results packed, the engine hosts stopped
finish() {
  echo "snakemake exit $1"
  pack
  stop_engines
  exit "$1"
}

# a started run: its exit status once it has ended, else what it has done so far and "still running" (exit 0)
report() {
  echo "snakemake log, last lines:"
  tail -n 12 "$state/snakemake.log" 2>/dev/null | grep -vE '^\s*$'
  echo "cells of $run here: $(cells)"
  [ -f "$state/rc" ] && finish "$(cat "$state/rc")"
  pack
  echo "still running (pid $(cat "$state/pid")): call --wait again while the machine is held"
  exit 0
}

case $mode in
  start)
    if [ -f "$state/pid" ] && [ ! -f "$state/rc" ] && kill -0 "$(cat "$state/pid")" 2>/dev/null; then
      echo "a started run of $run is still running (pid $(cat "$state/pid")): --wait for it or --stop it first"
      exit 1
    fi
    # the run's own copy of the working tree; what the last started run of RUN made there is kept (files the
    # sent tree has win)
    kept=
    rm -rf "$state.kept" && { [ ! -d "$tree" ] || { mv "$tree" "$state.kept" && kept=1; }; }
    rm -rf "$state" && mkdir -p "$tree" || exit 1
    tar -cf - --exclude=./.git --exclude=./.device --exclude=./.venv . | tar -xf - -C "$tree" ||
      { echo "cannot copy the tree to $tree"; exit 1; }
    if [ -n "$kept" ]; then
      (cd "$state.kept" && tar -cf - --ignore-failed-read "results/$run" "logs/$run" "benchmarks/$run" 2>/dev/null) |
        tar -xf - -C "$tree" --skip-old-files
      rm -rf "$state.kept"
    fi
    cd "$tree" || exit 1
    [ -z "$kept" ] || echo "kept from the last started run of $run: $(cells) cells in all" ;;
  wait | stop) [ ! -d "$tree" ] || cd "$tree" || exit 1 ;;
esac
export PYTHONPATH=$PWD/workflow:${PYTHONPATH:-}

case $mode in
  wait)
    [ -f "$state/pid" ] || { echo "no started run of $run here (start one with --start)"; exit 1; }
    pid=$(cat "$state/pid") t0=$SECONDS
    while [ ! -f "$state/rc" ] && kill -0 "$pid" 2>/dev/null && [ $((SECONDS - t0)) -lt "$wait_s" ]; do
      sleep 2
    done
    report ;;
  stop)
    [ -f "$state/pid" ] || { echo "no started run of $run here"; exit 1; }
    pid=$(cat "$state/pid")
    # every process of its session: Snakemake and the job it runs (SIGINT first, so a cell in flight is not
    # half-written); engine hosts live in sessions of their own and are stopped below
    pkill -INT -s "$pid"
    for _ in $(seq 30); do pgrep -s "$pid" >/dev/null || break; sleep 1; done
    pkill -KILL -s "$pid" && sleep 1
    [ -f "$state/rc" ] || echo 130 >"$state/rc"
    report ;;
esac

if ! python3 -c "import snakemake" 2>/dev/null; then
  bash offline-gpu/device-install-workflow.sh "$repo/.device/snakemake-wheels" >/dev/null || exit 1
fi
# the SmolLM2 GGUF (the real model and the dummy models' tokenizer), when its pieces were stashed; runs of
# dummy models whose tokenizer is carried (resources/tokenizers/) need none
gguf=/root/stash/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$gguf" ] && ls /root/stash/ggufpart0* >/dev/null 2>&1; then
  cat /root/stash/ggufpart0* > "$gguf.tmp" && mv "$gguf.tmp" "$gguf"
fi
if [ -f "$gguf" ]; then
  echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $gguf" | sha256sum -c - || exit 1
  export SPECSWEEP_GGUF=$gguf
fi
# a previous call's results.tar.gz, carried back (SPECSWEEP_RESUME=its path): the cells the machine lost
# between calls (a mirrored tree deletes them, a fresh machine never had them) come back before Snakemake
# looks; files already here are kept
if [ -n "${SPECSWEEP_RESUME:-}" ]; then
  tar xzf "$SPECSWEEP_RESUME" --skip-old-files "results/$run" || { echo "cannot resume from $SPECSWEEP_RESUME"; exit 1; }
  echo "resumed from $SPECSWEEP_RESUME: $(cells) cells"
fi
# the workload files and model folders first, in a Snakemake run of their own (`snakemake prepare`): they are
# not in the working tree this machine got, and made in the same run as the cells they would re-measure
# every cell already there (docs/design.md, "Resuming a run elsewhere")
prep=() take=0
for a in "$@"; do
  case $a in
    --configfile | --config) prep+=("$a") take=1 ;;
    --configfile=* | --config=*) prep+=("$a") take=0 ;;
    -*) take=0 ;;
    *) if [ "$take" -eq 1 ]; then prep+=("$a"); fi ;;
  esac
done
python3 -m snakemake prepare --cores 1 "${prep[@]}" >/dev/null 2>&1 || echo "snakemake prepare failed"

if [ "$mode" = start ]; then
  rm -f "$state/pid" "$state/rc" "$state/snakemake.log"
  # a session of its own (setsid), so that it outlives this call; its exit status lands in $state/rc
  # shellcheck disable=SC2016
  setsid bash -c 'timeout --signal=INT --kill-after=20 "$1" python3 -m snakemake "${@:3}" >"$2/snakemake.log" 2>&1
    echo $? >"$2/rc"' _ "$budget" "$state" "$@" </dev/null >/dev/null 2>&1 &
  pid=$!
  echo "$pid" >"$state/pid"
  # return only once it leads its own session: what a call leaves in the call's session may be killed at once
  for _ in $(seq 100); do
    [ "$(ps -o sid= -p "$pid" | tr -d ' ')" = "$pid" ] && break
    sleep 0.1
  done
  echo "started Snakemake for $run (pid $pid, at most ${budget} s, in $tree, log $state/snakemake.log)"
  exit 0
fi

timeout --signal=INT --kill-after=20 "$budget" python3 -m snakemake "$@"
finish $?
