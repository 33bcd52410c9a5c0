rule cell:
    input:
        workload="results/{run}/workloads/{workload}.json",
        model=model_dir,
    output:
        "results/{run}/cells/{model}/{workload}/{config}.json",
    log:
        "logs/{run}/cells/{model}/{workload}/{config}.log",
    benchmark:
        "benchmarks/{run}/cells/{model}/{workload}/{config}.tsv"
    # vanilla first, so speculative cells can record how many outputs match it token for token
    priority: lambda wc: 10 if wc.config == "vanilla" else 0
    conda:
        CONDA_ENV
    resources:
        gpu=cell_gpus,
    params:
        cli=SPECSWEEP,
        config=EFFECTIVE_CONFIG,
        model_arg=model_arg,
        settings=cell_settings_hash,
    shell:
        "{params.cli} run-cell --config {params.config:q} --workload-file {input.workload:q} "
        "--out {output:q} {params.model_arg} --log {log:q} > {log:q} 2>&1"
