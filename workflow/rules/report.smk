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
