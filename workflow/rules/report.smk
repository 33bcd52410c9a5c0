rule tables:
    input:
        cell_paths(),
    output:
        table_paths(),
    log:
        f"logs/{RUN}/tables.log",
    benchmark:
        f"benchmarks/{RUN}/tables.tsv"
    params:
        config=EFFECTIVE_CONFIG,
    localrule: True
    shell:
        "{SPECSWEEP} tables --config {params.config:q} --out results/{RUN}/tables > {log:q} 2>&1"


rule render_figures:
    input:
        table_paths(),
    output:
        figure_paths(),
    log:
        f"logs/{RUN}/figures.log",
    benchmark:
        f"benchmarks/{RUN}/figures.tsv"
    params:
        config=EFFECTIVE_CONFIG,
    localrule: True
    shell:
        "{SPECSWEEP} figures --config {params.config:q} --tables results/{RUN}/tables "
        "--out figures/{RUN} > {log:q} 2>&1"


# `snakemake figures`: tables and figures from the cells that exist now (missing ones are listed, not drawn).
rule figures:
    input:
        existing_cell_paths(),
    log:
        f"logs/{RUN}/figures-partial.log",
    params:
        config=EFFECTIVE_CONFIG,
    localrule: True
    shell:
        "({SPECSWEEP} tables --config {params.config:q} --out results/{RUN}/tables && "
        "{SPECSWEEP} figures --config {params.config:q} --tables results/{RUN}/tables --out figures/{RUN}) "
        "> {log:q} 2>&1"
