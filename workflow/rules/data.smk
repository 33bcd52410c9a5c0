rule corpus:
    output:
        CORPUS,
    log:
        "logs/corpus.log",
    benchmark:
        "benchmarks/corpus.tsv"
    localrule: True
    priority: FIRST
    conda:
        CONDA_ENV
    params:
        cli=SPECSWEEP,
        config=EFFECTIVE_CONFIG,
        sha256=STUDY.raw["corpus"]["sha256"],
    shell:
        "{params.cli} corpus --config {params.config:q} --out {output:q} > {log:q} 2>&1"


rule workload:
    input:
        corpus=CORPUS,
    output:
        "results/{run}/workloads/{workload}.{whash}.json",
    log:
        "logs/{run}/workloads/{workload}.{whash}.log",
    benchmark:
        "benchmarks/{run}/workloads/{workload}.{whash}.tsv"
    localrule: True
    priority: FIRST
    conda:
        CONDA_ENV
    params:
        cli=SPECSWEEP,
        config=EFFECTIVE_CONFIG,
    shell:
        "{params.cli} workload --config {params.config:q} --name {wildcards.workload:q} "
        "--corpus {input.corpus:q} --out {output:q} > {log:q} 2>&1"


rule build_model:
    output:
        directory("resources/models/{model}"),
    log:
        "logs/build_model/{model}.log",
    benchmark:
        "benchmarks/build_model/{model}.tsv"
    priority: FIRST
    conda:
        CONDA_ENV
    params:
        cli=SPECSWEEP,
        dtype=lambda wc: STUDY.models[wc.model].dtype or "float32",
    shell:
        "{params.cli} build-model --out {output:q} --dtype {params.dtype:q} > {log:q} 2>&1"
