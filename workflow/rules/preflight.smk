# Preflight (`snakemake preflight --configfile config/preflight.yaml`): every cell tried once on the engine
# of its (model, ladder step), before any weight is downloaded; each job writes a verdict (ok, failed with
# its first error, refused: more GPUs than the machine has), so one failing cell never stops the others.
# See workflow/specsweep/preflight.py.
rule preflight_cell:
    input:
        # ancient, as the measure rule's: verdicts already there stay when the inputs are rebuilt elsewhere
        workload=ancient(workload_file),
        model=ancient(model_dir),
        draft=ancient(draft_dir),
    output:
        paths.result(paths.PREFLIGHT),
    log:
        paths.log(paths.PREFLIGHT),
    benchmark:
        paths.benchmark(paths.PREFLIGHT)
    priority: preflight_priority
    conda:
        CONDA_ENV
    resources:
        gpu=cell_gpus,
    params:
        cli=SPECSWEEP,
        config=EFFECTIVE_CONFIG,
        model_arg=model_arg,
        watch=SCHEDULER_PID,
    shell:
        "{params.cli} preflight-cell --config {params.config:q} --workload-file {input.workload:q} "
        "--out {output:q} {params.model_arg} --log {log:q} --watch-pid {params.watch} > {log:q} 2>&1"


rule preflight_report:
    input:
        preflight_paths(),
    output:
        paths.preflight_report(RUN),
    log:
        paths.run_log(RUN, "preflight-report"),
    localrule: True
    conda:
        LIGHT_ENV
    params:
        cli=SPECSWEEP,
        config=EFFECTIVE_CONFIG,
    shell:
        "{params.cli} preflight-report --config {params.config:q} > {log:q} 2>&1"


# `snakemake preflight`: every verdict, then the report. A rule of inputs only, as `all` is: asked for the
# report's files, Snakemake treats the verdicts as intermediate files and leaves a missing one missing while
# the report is up to date with those that exist (a preflight stopped half way stayed half done).
rule preflight:
    input:
        preflight_paths(),
        rules.preflight_report.output,
