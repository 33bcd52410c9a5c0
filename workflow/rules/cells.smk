# One job per cell repeat, with its own output path. The job asks the engine host of its (model, ladder
# step, repeat) to measure it (spawning the host when none runs), so one engine serves the adjacent cells
# of the schedule; the job writes the cell. See docs/design.md, "Engine reuse".
rule measure:
    input:
        # ancient: a workload or model folder rebuilt (a fresh checkout, another machine) must not re-measure
        # the cells already there: the workload file's name carries its config hash and the job checks it
        # (and the model folder) before measuring; a changed setting is the params trigger's and the tables'
        workload=ancient(workload_file),
        model=ancient(model_dir),
        draft=ancient(draft_dir),
        run_workloads=ancient(RUN_WORKLOAD_FILES),
    output:
        paths.MEASUREMENT,
    log:
        paths.log(paths.CELL),
    benchmark:
        paths.benchmark(paths.CELL)
    priority: cell_priority
    group:
        ENGINE_GROUP
    conda:
        CONDA_ENV
    resources:
        gpu=cell_gpus,
        engine=1,
    params:
        cli=SPECSWEEP,
        config=EFFECTIVE_CONFIG,
        model_arg=model_arg,
        watch=SCHEDULER_PID,
    shell:
        "{params.cli} run-cell --config {params.config:q} --workload-file {input.workload:q} "
        "--out {output:q} {params.model_arg} --log {log:q} --watch-pid {params.watch} > {log:q} 2>&1"


# Fidelity: one cell measured by specsweep's engine and by vLLM's own run_vllm, fresh engines, interleaved
# passes (`snakemake fidelity`, or one file by path). Not part of `all`: it is a check of the harness.
rule fidelity_cell:
    input:
        workload=workload_file,
        model=model_dir,
        draft=draft_dir,
    output:
        paths.result(paths.FIDELITY),
    log:
        paths.log(paths.FIDELITY),
    benchmark:
        paths.benchmark(paths.FIDELITY)
    conda:
        CONDA_ENV
    resources:
        gpu=cell_gpus,
    params:
        cli=SPECSWEEP,
        config=EFFECTIVE_CONFIG,
        model_arg=model_arg,
    shell:
        "{params.cli} fidelity --config {params.config:q} --cell {wildcards.model:q}/{wildcards.workload:q}/{wildcards.step:q} "
        "--workload-file {input.workload:q} --out {output:q} {params.model_arg} > {log:q} 2>&1"


rule fidelity:
    input:
        [
            str(paths.fidelity(paths.RESULTS, RUN, c.model, c.workload, c.step))
            for c in STUDY.cells
            if c.step == STUDY.baseline and c.concurrency is None
        ],
