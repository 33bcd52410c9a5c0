#!/usr/bin/env bash
# An offline GPU machine (README.md here; vLLM already installed in /tmp/site): installs Snakemake from carried
# wheels, reassembles the SmolLM2 GGUF from stashed pieces, then runs Snakemake itself with the arguments given,
# stopping it before the call's time limit (a later call resumes by existence), and packs the run's results,
# logs and benchmarks into $OUT/results.tar.gz.
#
#   bash offline-gpu/device-run.sh BUDGET_S RUN SNAKEMAKE_ARG...
set -uo pipefail
budget=$1 run=$2
shift 2
# shellcheck source=/dev/null
. /tmp/site/env.sh
if ! python3 -c "import snakemake" 2>/dev/null; then
  bash offline-gpu/device-install-workflow.sh .device/snakemake-wheels >/dev/null || exit 1
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
export PYTHONPATH=$PWD/workflow:$PYTHONPATH SPECSWEEP_ENGINE_IDLE_S=${SPECSWEEP_ENGINE_IDLE_S:-60}
# a previous call's results.tar.gz, carried back (SPECSWEEP_RESUME=its path): the cells the machine lost
# between calls (a mirrored tree deletes them, a fresh machine never had them) come back before Snakemake
# looks; files already here are kept
if [ -n "${SPECSWEEP_RESUME:-}" ]; then
  tar xzf "$SPECSWEEP_RESUME" --skip-old-files "results/$run" || { echo "cannot resume from $SPECSWEEP_RESUME"; exit 1; }
  echo "resumed from $SPECSWEEP_RESUME: $(find "results/$run/cells" -name 'r*.json' | wc -l) cells"
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
timeout --signal=INT --kill-after=20 "$budget" python3 -m snakemake "$@"
rc=$?
echo "snakemake exit $rc"
if [ -n "${OUT:-}" ]; then
  tar czf "$OUT/results.tar.gz" --ignore-failed-read "results/$run" "logs/$run" "benchmarks/$run" "figures/$run" 2>/dev/null
  ls -la "$OUT"
fi
# a host still measuring when the budget ran out is not waited for
SPECSWEEP_ENGINE_START_TIMEOUT_S=10 python3 -m specsweep.cli engines --stop || true
exit $rc
