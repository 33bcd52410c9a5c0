#!/usr/bin/env bash
# Device side (a lent GPU node, after .device/install-vllm.sh): the preflight of a config with every GPU busy.
# `specsweep preflight-plan` splits the cells into lanes: lane 0, the cells refused from the config alone (no
# engine: eight at once), and one lane per GPU, whole models each, so no engine starts twice. Each lane runs
# Snakemake in its own copy of the working folder (engine hosts are per folder; the GPU slot locks are per
# node, so each lane's engines take a GPU of their own), stopped before the call's time limit; the verdicts,
# logs and benchmarks come back into this folder and, packed, into $OUT/results.tar.gz. The report is made
# with `specsweep preflight-report` wherever the verdicts are (it starts nothing).
#
#   bash workflow/scripts/device-preflight.sh BUDGET_S CONFIG SONNET
#
# SPECSWEEP_PREFLIGHT_GPUS overrides the GPU count nvidia-smi gives (a dry run elsewhere).
set -uo pipefail
budget=$1 config=$2 sonnet=$3
# shellcheck source=/dev/null
[ -f /tmp/site/env.sh ] && . /tmp/site/env.sh
if ! python3 -c "import snakemake" 2>/dev/null; then
  bash workflow/scripts/device-install-workflow.sh .device/snakemake-wheels >/dev/null || exit 1
fi
export PYTHONPATH=$PWD/workflow:${PYTHONPATH:-} SPECSWEEP_ENGINE_IDLE_S=${SPECSWEEP_ENGINE_IDLE_S:-60}
here=$PWD
gpus=${SPECSWEEP_PREFLIGHT_GPUS:-$(nvidia-smi -L | grep -c '^GPU ')}
run=$(python3 -c 'import sys; from specsweep.config import load_study; print(load_study(sys.argv[1]).run)' "$config") || exit 1
echo "preflight of run $run on $gpus GPUs"
# the workload files and model folders before any lane (see device-run.sh): verdicts already in the working
# tree are then not made again
python3 -m snakemake prepare --cores 1 --configfile "$config" --config sonnet_path="$sonnet" >/dev/null 2>&1 ||
  echo "snakemake prepare failed"
pids=()
for lane in $(seq 0 "$gpus"); do
  mapfile -t targets < <(python3 -m specsweep.cli preflight-plan --config "$config" --gpus "$gpus" --lane "$lane")
  [ ${#targets[@]} -gt 0 ] || continue
  dir=/tmp/specsweep-lane$lane
  # a lane folder left by an earlier call of the same warm machine keeps its verdicts: the lane resumes
  mkdir -p "$dir" && cp -a "$here/." "$dir/" && rm -rf "$dir/.snakemake/locks"
  # lane 0 starts no engine: its cells only read config.json files, so any number run at once
  cores=1 gpu_res=1
  [ "$lane" -eq 0 ] && cores=8 gpu_res=$((gpus * 1000))
  (
    cd "$dir" || exit 1
    timeout --signal=INT --kill-after=20 "$budget" python3 -m snakemake "${targets[@]}" --configfile "$config" \
      --config sonnet_path="$sonnet" --cores "$cores" --resources gpu="$gpu_res" --rerun-incomplete \
      >"$dir/lane.log" 2>&1
    echo "lane $lane (${#targets[@]} cells): snakemake exit $?" >>"$dir/lane.log"
    SPECSWEEP_ENGINE_START_TIMEOUT_S=10 python3 -m specsweep.cli engines --stop >/dev/null 2>&1 || true
  ) &
  pids+=($!)
done
wait "${pids[@]}"
for dir in /tmp/specsweep-lane[0-9]*; do
  tail -n 3 "$dir/lane.log"
  for sub in "results/$run/preflight" "logs/$run/preflight" "benchmarks/$run/preflight"; do
    [ -d "$dir/$sub" ] && mkdir -p "$sub" && cp -a "$dir/$sub/." "$sub/"
  done
  mkdir -p "logs/$run" && cp "$dir/lane.log" "logs/$run/$(basename "$dir").log"
done
python3 -m specsweep.cli preflight-report --config "$config" || true
if [ -n "${OUT:-}" ]; then
  tar czf "$OUT/results.tar.gz" --ignore-failed-read "results/$run" "logs/$run" "benchmarks/$run" 2>/dev/null
fi
