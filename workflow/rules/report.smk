rule tables:
    input:
        cell_paths(),
    output:
        reported_table_paths(),
    log:
        paths.run_log(RUN, "tables"),
    benchmark:
        paths.run_benchmark(RUN, "tables")
    localrule: True
    conda:
        LIGHT_ENV
    params:
        cli=SPECSWEEP,
        config=EFFECTIVE_CONFIG,
        out=lambda wc, output: os.path.dirname(output[0]),
    shell:
        "{params.cli} tables --config {params.config:q} --out {params.out:q} > {log:q} 2>&1"


rule render_figures:
    input:
        table_paths(),
        k_ref_paths(),
    output:
        reported_figure_paths(),
    log:
        paths.run_log(RUN, "figures"),
    benchmark:
        paths.run_benchmark(RUN, "figures")
    localrule: True
    conda:
        LIGHT_ENV
    params:
        cli=SPECSWEEP,
        config=EFFECTIVE_CONFIG,
        tables=lambda wc, input: os.path.dirname(input[0]),
        out=lambda wc, output: os.path.dirname(output[0]),
    shell:
        "{params.cli} figures --config {params.config:q} --tables {params.tables:q} --out {params.out:q} > {log:q} 2>&1"


# The advisor tested on a model it was not fitted to: each model's speedups predicted with another model's R at
# the same workload, ladder step and b (only where two models measured one; crossmodel_paths).
rule validate_crossmodel:
    input:
        table_paths(),
    output:
        crossmodel_paths(),
    log:
        paths.run_log(RUN, "validate-crossmodel"),
    localrule: True
    conda:
        CONDA_ENV
    params:
        cli=SPECSWEEP,
        run=RUN,
        out=lambda wc, output: os.path.dirname(output[0]),
    shell:
        "{params.cli} validate --run {params.run:q} --cross-model --out {params.out:q} > {log:q} 2>&1"


# `snakemake figures`: tables and figures from the cells that exist now (missing ones are listed, not drawn).
# It has no inputs on purpose: it never schedules a cell (nor what a cell is made from).
rule figures:
    log:
        paths.run_log(RUN, "figures-partial"),
    localrule: True
    conda:
        LIGHT_ENV
    params:
        cli=SPECSWEEP,
        config=EFFECTIVE_CONFIG,
        tables=str(paths.tables_dir(RUN)),
        out=str(paths.figures_dir(RUN)),
    shell:
        "({params.cli} tables --config {params.config:q} --out {params.tables:q} && "
        "{params.cli} figures --config {params.config:q} --tables {params.tables:q} --out {params.out:q}) "
        "> {log:q} 2>&1"


# The advice flow (`snakemake advice`, config key `advice`): the run's cells of the advice model give the step
# times (its tables), the traffic file is replayed on the CPU for every ngram and suffix step at every
# concurrency the run measured, and `specsweep advise` predicts each drafter's speedup from both.
rule advice_replay:
    input:
        traffic=advice_traffic,
        model=ancient(advice_model_dir),
    output:
        str(ADVICE_DIR / "replay" / "{name}.json"),
    log:
        paths.run_log(RUN, "advice-replay-{name}"),
    wildcard_constraints:
        name=names_regex(list(ADVICE)),
    localrule: True
    conda:
        CONDA_ENV
    params:
        cli=SPECSWEEP,
        config=EFFECTIVE_CONFIG,
        tokenizer=lambda wc, input: tokenizer_path(
            STUDY.models[STUDY.advice_model], input.model
        ),
    shell:
        "{params.cli} advice-replay --config {params.config:q} --name {wildcards.name:q} "
        "--tokenizer {params.tokenizer:q} --out {output:q} > {log:q} 2>&1"


rule advise:
    input:
        replays=ADVICE_REPLAYS,
        tables=table_paths(),
    output:
        md=str(ADVICE_DIR / "advice.md"),
        figure=str(ADVICE_DIR / "advice.png"),
    log:
        paths.run_log(RUN, "advise"),
    localrule: True
    conda:
        LIGHT_ENV
    params:
        cli=SPECSWEEP,
        replays=lambda wc, input: " ".join(
            f"--replay {shlex.quote(p)}" for p in input.replays
        ),
        tables=lambda wc, input: os.path.dirname(input.tables[0]),
        model=STUDY.advice_model,
        workload=lambda wc: (
            f"--workload {shlex.quote(w)}"
            if (w := (STUDY.raw.get("advice") or {}).get("workload"))
            else ""
        ),
    shell:
        "{params.cli} advise {params.replays} --tables {params.tables:q} --model {params.model:q} "
        "{params.workload} --out {output.md:q} --figure {output.figure:q} > {log:q} 2>&1"


# `snakemake advice`: the cells, their tables, the replays and the advice page.
rule advice:
    input:
        rules.advise.output if ADVICE else [],
    localrule: True
