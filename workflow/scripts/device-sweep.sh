#!/usr/bin/env bash
# Runs a study's steps with the specsweep CLI alone, for a machine that has vLLM but no Snakemake (the lent
# H200 machine): the same steps, in the DAG's order, each cell in its own process; resume by existence
# (a finished cell is never redone), stop starting new cells once the time budget is spent.
#
#   bash workflow/scripts/device-sweep.sh MODE CONFIG WORKDIR BUDGET_S [--set KEY=VALUE ...]
#   MODE: cells     corpus, workloads, model (from $GGUF if set), then every missing cell
#         fidelity  vanilla/ngram/trident on $FIDELITY_WORKLOAD (default sonnet), each measured by specsweep
#                   and by vLLM's own throughput harness with vLLM bench's sampling (temperature 1, ignore_eos)
#         repeat    one cell ($REPEAT_CELL, default <model>/sonnet/trident) three times, as runs <run>-repeat{1,2,3}
set -u
mode=$1 cfg=$2 work=$3 budget=$4
shift 4
sets=("$@")
t0=$(date +%s)
cli=(python3 -m specsweep.cli)
run=$(python3 -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['run'])" "$cfg")
model=$(python3 -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['models'][0]['name'])" "$cfg")
mkdir -p "$work/logs"
left() { echo $(( budget - ($(date +%s) - t0) )); }
say() { echo "[$(date -u +%H:%M:%S) +$(( $(date +%s) - t0 ))s] $*"; }

prepare() {
  [ -f "$work/resources/sonnet.txt" ] || "${cli[@]}" corpus --config "$cfg" "${sets[@]}" --out "$work/resources/sonnet.txt" || exit 1
  for w in $(python3 -c "import sys, yaml; print(' '.join(yaml.safe_load(open(sys.argv[1]))['workloads']))" "$cfg"); do
    f="$work/results/$run/workloads/$w.json"
    [ -f "$f" ] || "${cli[@]}" workload --config "$cfg" "${sets[@]}" --name "$w" --corpus "$work/resources/sonnet.txt" --out "$f" || exit 1
  done
  if [ ! -f "$work/resources/models/$model/config.json" ]; then
    say "building $model"
    "${cli[@]}" build-model --out "$work/resources/models/$model" ${GGUF:+--gguf "$GGUF"} > "$work/logs/build-model.log" 2>&1 || { tail -5 "$work/logs/build-model.log"; exit 1; }
  fi
}

cell() {  # cell RUN WORKLOAD CONFIG [extra --set ...]
  local r=$1 w=$2 c=$3
  shift 3
  local out="$work/results/$r/cells/$model/$w/$c.json" log="$work/logs/$r-$w-$c.log"
  [ -f "$out" ] && return 0
  if [ "$(left)" -le 0 ]; then say "budget spent: $r/$w/$c not started"; return 1; fi
  "${cli[@]}" run-cell --config "$cfg" "${sets[@]}" "$@" --workload-file "$work/results/$run/workloads/$w.json" \
    --out "$out" --model-path "$work/resources/models/$model" --log "$log" > "$log" 2>&1 \
    && say "$(tail -1 "$log")" || say "FAILED $r/$w/$c: $(grep -v '^\s*$' "$log" | tail -2 | tr '\n' ' ' | cut -c1-400)"
}

prepare
case "$mode" in
  cells)
    for path in $("${cli[@]}" cells --config "$cfg" "${sets[@]}" --results "$work/results" 2>/dev/null); do
      IFS=/ read -r -a p <<< "${path#$work/results/}"
      cell "$run" "${p[3]}" "${p[4]%.json}" || break
    done ;;
  fidelity)
    w=${FIDELITY_WORKLOAD:-sonnet}
    for c in vanilla ngram trident; do
      cell "$run-fidelity" "$w" "$c" --set "run=$run-fidelity" --set "sampling={temperature: 1.0, ignore_eos: true}" || break
      h="$work/results/$run-fidelity/harness/$model-$w-$c.json"
      [ -f "$h" ] || "${cli[@]}" harness --config "$cfg" "${sets[@]}" --set "run=$run-fidelity" \
        --set "sampling={temperature: 1.0, ignore_eos: true}" --cell "$model/$w/$c" \
        --workload-file "$work/results/$run/workloads/$w.json" --model-path "$work/resources/models/$model" \
        --out "$h" > "$work/logs/harness-$w-$c.log" 2>&1 && say "harness $(tail -1 "$work/logs/harness-$w-$c.log")" \
        || say "FAILED harness $w/$c: $(tail -2 "$work/logs/harness-$w-$c.log" | tr '\n' ' ' | cut -c1-400)"
    done ;;
  repeat)
    IFS=/ read -r -a rc <<< "${REPEAT_CELL:-$model/sonnet/trident}"
    for i in 1 2 3; do cell "$run-repeat$i" "${rc[1]}" "${rc[2]}" --set "run=$run-repeat$i" || break; done ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
say "done ($mode)"
