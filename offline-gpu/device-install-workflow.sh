#!/usr/bin/env bash
# An offline GPU machine (Python 3.12, no network; README.md here). Installs Snakemake and whatever else the
# specsweep workflow lacks there from carried wheel folders into /tmp/site, the folder that vLLM and its deps
# were installed into (by an install-vllm.sh that is not part of this repository), then checks the result.
#
#   bash offline-gpu/device-install-workflow.sh WHEEL_DIR...
#   e.g. bash offline-gpu/device-install-workflow.sh .device/snakemake-wheels .device/specsweep-wheels
#
# Run it after install-vllm.sh: Snakemake's jsonschema, referencing, rpds-py, jsonschema-specifications,
# pydantic, pydantic-core, annotated-types and typing-inspection come from vLLM's deps/ folder; pyyaml, jinja2,
# requests, packaging, psutil, tabulate, wrapt, attrs, pyarrow and matplotlib come with the machine's image.
# Afterwards each command needs PYTHONPATH=/tmp/site (`. /tmp/site/env.sh` sets it). Safe to run again.
# Environment: SITE (default /tmp/site: a folder of yours or root's that nobody else can write, as everything
# in it is imported; made 0755 when absent), SNAKEMAKE_VERSION (the version to expect, default 9.27.1).
set -euo pipefail
# shellcheck source=offline-gpu/private.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/private.sh"

site=${SITE:-/tmp/site}
want=${SNAKEMAKE_VERSION:-9.27.1}
if [ "$#" -lt 1 ]; then
  echo "usage: $0 WHEEL_DIR..." >&2
  exit 2
fi
[ -e "$site" ] || [ -L "$site" ] || (umask 022 && mkdir -p -- "$site")
trusted_path "$site" SITE

shopt -s nullglob
wheels=()
for d in "$@"; do
  if [ ! -d "$d" ]; then
    echo "not a folder: $d" >&2
    exit 2
  fi
  found=("$d"/*.whl)
  [ "${#found[@]}" -gt 0 ] || echo "note: no wheels in $d"
  wheels+=("${found[@]}")
done
shopt -u nullglob

# Two versions of one package would stop the whole install: refuse them before pip sees them.
dups=$(for w in "${wheels[@]}"; do n=${w##*/}; n=${n%%-*}; echo "$n" | tr '[:upper:]' '[:lower:]' | tr '_.' '--'; done | sort | uniq -d)
if [ -n "$dups" ]; then
  echo "more than one wheel of: $dups" >&2
  exit 1
fi

# Leave out the wheels whose name-version is already installed in $site (a second run installs nothing).
todo=()
for w in "${wheels[@]}"; do
  nv=$(echo "${w##*/}" | cut -d- -f1-2)  # NAME-VERSION, as its .dist-info folder is named
  if [ -d "$site" ] && [ -n "$(find "$site" -maxdepth 1 -iname "$nv.dist-info" -print -quit)" ]; then
    continue
  fi
  todo+=("$w")
done
if [ "${#todo[@]}" -gt 0 ]; then
  echo "installing ${#todo[@]} of ${#wheels[@]} wheels into $site"
  # Without --upgrade pip keeps what $site already has (vLLM's bin/ too, so it warns that bin/ exists: harmless).
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "${todo[@]}"
else
  echo "all ${#wheels[@]} wheels already installed in $site"
fi

export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}

# Every requirement of what the workflow imports, followed through: a missing one fails, an unmet version
# bound only warns (the image's own versions are what there is; Snakemake pins packaging<26, for one).
python3 - <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, distribution
from packaging.requirements import Requirement

missing, unmet, seen = [], [], set()
# gguf: the SmolLM2 model and the dummy models' tokenizer are built from its GGUF (transformers reads it with gguf)
todo = [Requirement(n) for n in ("snakemake", "jsonschema", "pyarrow", "matplotlib", "pyyaml", "gguf")]
while todo:
    req = todo.pop()
    key = req.name.lower().replace("_", "-").replace(".", "-")
    try:
        dist = distribution(req.name)
    except PackageNotFoundError:
        missing.append(str(req))
        continue
    if dist.version not in req.specifier:
        unmet.append(f"{req} (found {dist.version})")
    if key in seen:
        continue
    seen.add(key)
    for line in dist.requires or []:
        sub = Requirement(line)
        if sub.marker is None or sub.marker.evaluate({"extra": ""}):
            todo.append(sub)
for u in sorted(set(unmet)):
    print("WARNING: version bound not met:", u)
if missing:
    print("MISSING:", ", ".join(sorted(set(missing))), file=sys.stderr)
    print("(vLLM's deps/ supplies jsonschema, referencing, rpds-py, pydantic...: run install-vllm.sh first)", file=sys.stderr)
    sys.exit(1)
print(f"dependency check: {len(seen)} distributions present")
PY

python3 -c '
import sys, snakemake, jsonschema, pyarrow, matplotlib
from importlib.metadata import version
print("python", sys.version.split()[0], "| snakemake", version("snakemake"), "from", snakemake.__file__,
      "| jsonschema", version("jsonschema"), "| pyarrow", pyarrow.__version__, "| matplotlib", matplotlib.__version__)
'

got=$(python3 -m snakemake --version)
if [ "$got" != "$want" ]; then
  echo "python3 -m snakemake --version says '$got', expected $want" >&2
  exit 1
fi
echo "snakemake $got OK (use: export PYTHONPATH=$site; python3 -m snakemake ...)"
