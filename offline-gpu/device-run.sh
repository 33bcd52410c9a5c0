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
# Environment: SPECSWEEP_SITE_ENV (the file that puts vLLM on PYTHONPATH, default /tmp/site/env.sh; it and its
# folder must be yours or root's and writable by nobody else), SPECSWEEP_DETACHED_DIR (an absolute path: where a
# started run keeps its tree, pid, log and exit status, default ~/.cache/specsweep-detached; a private folder of
# yours, checked as private.sh says), STASH (the carried files, default /root/stash, as in carry.sh),
# SPECSWEEP_RESUME (below), OUT (where results.tar.gz goes).
set -uo pipefail
# shellcheck source=offline-gpu/private.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/private.sh" || exit 1
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
# a run name, as the config's `run` is one: it names folders here and under results/, logs/, ...
[[ $run =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ ]] ||
  private_refuse "RUN $(printf %q "${run:0:200}"): not a run name (letters, digits, '.', '_', '-'; a letter or digit first)"
[ "$mode" != wait ] || [[ $wait_s =~ ^[0-9]{1,9}$ ]] || private_refuse "WAIT_S $(printf %q "${wait_s:0:60}"): not a number of seconds"
root=${SPECSWEEP_DETACHED_DIR:-${HOME:?is unset: set SPECSWEEP_DETACHED_DIR}/.cache/specsweep-detached}
[[ $root == /* ]] || private_refuse "SPECSWEEP_DETACHED_DIR=${root:0:200}: must be an absolute path"
state=$root/$run
tree=$state/tree repo=$PWD stash=${STASH:-/root/stash}
case ${SPECSWEEP_RESUME:-/} in /*) ;; *) SPECSWEEP_RESUME=$repo/$SPECSWEEP_RESUME ;; esac
# the started runs' folder and the run's own: private and marked (private.sh), checked before anything there is
# read, run, signalled or removed; --wait and --stop never create them
if [ "$mode" = start ] || [ -e "$root" ] || [ -L "$root" ]; then
  private_dir "$root" .specsweep-detached SPECSWEEP_DETACHED_DIR
  if [ -e "$state" ] || [ -L "$state" ]; then private_dir "$state" .specsweep-run SPECSWEEP_DETACHED_DIR; fi
fi
site_env=${SPECSWEEP_SITE_ENV:-/tmp/site/env.sh}
trusted_path "$site_env" SPECSWEEP_SITE_ENV
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

# the started run's Snakemake, provably: the pid recorded in the run's private folder leads a session of its own,
# runs as this user and carries the run's random token on its command line (a pid since reused, or any other
# process, gets no signal and is not waited for)
ours() {
  local token
  read -r pid <"$state/pid" 2>/dev/null && read -r token <"$state/token" 2>/dev/null || return 1
  [[ $pid =~ ^[1-9][0-9]{0,9}$ && $token =~ ^[0-9a-f]{32}$ ]] || return 1
  [ "$(stat -c %u "/proc/$pid" 2>/dev/null)" = "$(id -u)" ] || return 1
  [ "$(ps -o sid= -p "$pid" | tr -d ' ')" = "$pid" ] || return 1
  # grep reads to the end (no -q): an early exit would SIGPIPE tr, and pipefail would then say "not ours"
  tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -xF "specsweep-detached-$token" >/dev/null
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
  if [ -f "$state/rc" ]; then
    read -r rc <"$state/rc"
    [[ $rc =~ ^[0-9]{1,3}$ ]] || rc=1
    finish "$rc"
  fi
  pack
  echo "still running (pid $pid): call --wait again while the machine is held"
  exit 0
}

case $mode in
  start)
    if [ ! -f "$state/rc" ] && ours; then
      echo "a started run of $run is still running (pid $pid): --wait for it or --stop it first"
      exit 1
    fi
    # the run's own copy of the working tree; what the last started run of RUN made there is kept (files the
    # sent tree has win); no run name starts with '.', so .kept-RUN is no run's folder
    kept=$root/.kept-$run
    rm -rf "$kept" && { [ ! -d "$tree" ] || mv "$tree" "$kept"; } || exit 1
    [ -d "$kept" ] || kept=
    rm -rf "$state" || exit 1
    private_dir "$state" .specsweep-run SPECSWEEP_DETACHED_DIR
    mkdir "$tree" || exit 1
    tar -cf - --exclude=./.git --exclude=./.device --exclude=./.venv . | tar -xf - -C "$tree" ||
      { echo "cannot copy the tree to $tree"; exit 1; }
    if [ -n "$kept" ]; then
      (cd "$kept" && tar -cf - --ignore-failed-read "results/$run" "logs/$run" "benchmarks/$run" 2>/dev/null) |
        tar -xf - -C "$tree" --skip-old-files
      rm -rf "$kept"
    fi
    cd "$tree" || exit 1
    [ -z "$kept" ] || echo "kept from the last started run of $run: $(cells) cells in all" ;;
  wait | stop) [ ! -d "$tree" ] || cd "$tree" || exit 1 ;;
esac
export PYTHONPATH=$PWD/workflow:${PYTHONPATH:-}

case $mode in
  wait)
    [ -f "$state/pid" ] || { echo "no started run of $run here (start one with --start)"; exit 1; }
    t0=$SECONDS
    while [ ! -f "$state/rc" ] && ours && [ $((SECONDS - t0)) -lt "$wait_s" ]; do
      sleep 2
    done
    ours || [ -f "$state/rc" ] || echo 1 >"$state/rc"  # gone without its status: ended by someone else
    report ;;
  stop)
    [ -f "$state/pid" ] || { echo "no started run of $run here"; exit 1; }
    # every process of its session: Snakemake and the job it runs (SIGINT first, so a cell in flight is not
    # half-written); engine hosts live in sessions of their own and are stopped below
    if ours; then
      pkill -INT -s "$pid"
      for _ in $(seq 30); do pgrep -s "$pid" >/dev/null || break; sleep 1; done
      pkill -KILL -s "$pid" && sleep 1
    elif [ ! -f "$state/rc" ]; then
      echo "pid ${pid:-?} of $run is not its Snakemake (ended, or another process now): nothing signalled"
    fi
    [ -f "$state/rc" ] || echo 130 >"$state/rc"
    report ;;
esac

if ! python3 -c "import snakemake" 2>/dev/null; then
  bash offline-gpu/device-install-workflow.sh "$repo/.device/snakemake-wheels" >/dev/null || exit 1
fi
# the SmolLM2 GGUF (the real model and the dummy models' tokenizer), when its pieces were stashed; runs of
# dummy models whose tokenizer is carried (resources/tokenizers/) need none
# (the stash is checked as carry.sh checks it: private, marked)
gguf=$stash/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -e "$stash" ] || [ -L "$stash" ]; then private_dir "$stash" .specsweep-stash STASH; fi
if [ ! -f "$gguf" ] && ls "$stash"/ggufpart0* >/dev/null 2>&1; then
  cat "$stash"/ggufpart0* > "$gguf.tmp" && mv "$gguf.tmp" "$gguf"
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
  rm -f "$state/pid" "$state/rc" "$state/snakemake.log" "$state/token"
  # a random token on its command line (as its $0) proves later that a pid is this run's (see ours)
  token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  (umask 077 && echo "$token" >"$state/token") || exit 1
  # a session of its own (setsid), so that it outlives this call; its exit status lands in $state/rc
  # shellcheck disable=SC2016
  setsid bash -c 'timeout --signal=INT --kill-after=20 "$1" python3 -m snakemake "${@:3}" >"$2/snakemake.log" 2>&1
    echo $? >"$2/rc"' "specsweep-detached-$token" "$budget" "$state" "$@" </dev/null >/dev/null 2>&1 &
  pid=$!
  (umask 077 && echo "$pid" >"$state/pid") || exit 1
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
