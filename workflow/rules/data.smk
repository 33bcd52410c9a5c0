rule corpus:
    output:
        CORPUS,
    log:
        "logs/corpus.log",
    benchmark:
        "benchmarks/corpus.tsv"
    localrule: True
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
        "results/{run}/workloads/{workload}.json",
    log:
        "logs/{run}/workloads/{workload}.log",
    benchmark:
        "benchmarks/{run}/workloads/{workload}.tsv"
    localrule: True
    conda:
        CONDA_ENV
    params:
        cli=SPECSWEEP,
        config=EFFECTIVE_CONFIG,
        settings=workload_hash,
    shell:
        "{params.cli} workload --config {params.config:q} --name {wildcards.workload:q} "
        "--corpus {input.corpus:q} --out {output:q} > {log:q} 2>&1"


# Models built by a recipe (build:) and models without weights (weights: dummy) share the output pattern
# resources/models/{model}; each rule is constrained to its own models.
RECIPE_MODELS = [m.name for m in STUDY.models.values() if m.build]
DUMMY_MODELS = [m.name for m in STUDY.models.values() if m.weights == "dummy"]
# SmolLM2-135M-Instruct's tokenizer alone: the tokenizer of every dummy model.
DUMMY_TOKENIZER = "resources/tokenizers/smollm2-135m-instruct"
NO_MATCH = "(?!)"
# The architectures live in the repository (absolute: the working directory may be elsewhere, -d).
ARCHITECTURES = os.path.join(workflow.basedir, "config", "architectures")


rule build_model:
    output:
        directory("resources/models/{model}"),
    log:
        "logs/build_model/{model}.log",
    benchmark:
        "benchmarks/build_model/{model}.tsv"
    wildcard_constraints:
        model="|".join(RECIPE_MODELS) or NO_MATCH,
    conda:
        CONDA_ENV
    params:
        cli=SPECSWEEP,
        dtype=lambda wc: STUDY.models[wc.model].dtype or "float32",
    shell:
        "{params.cli} build-model --out {output:q} --dtype {params.dtype:q} > {log:q} 2>&1"


rule dummy_tokenizer:
    output:
        directory(DUMMY_TOKENIZER),
    log:
        "logs/build_model/dummy_tokenizer.log",
    benchmark:
        "benchmarks/build_model/dummy_tokenizer.tsv"
    localrule: True
    conda:
        CONDA_ENV
    params:
        cli=SPECSWEEP,
    shell:
        "{params.cli} build-tokenizer --out {output:q} > {log:q} 2>&1"


rule dummy_model:
    input:
        tokenizer=DUMMY_TOKENIZER,
        architecture=lambda wc: os.path.join(
            ARCHITECTURES, STUDY.models[wc.model].architecture, "config.json"
        ),
    output:
        directory("resources/models/{model}"),
    log:
        "logs/build_model/{model}.log",
    benchmark:
        "benchmarks/build_model/{model}.tsv"
    wildcard_constraints:
        model="|".join(DUMMY_MODELS) or NO_MATCH,
    localrule: True
    conda:
        CONDA_ENV
    params:
        cli=SPECSWEEP,
        architecture=lambda wc: STUDY.models[wc.model].architecture,
        root=ARCHITECTURES,
    shell:
        "{params.cli} dummy-model --architecture {params.architecture:q} --architectures {params.root:q} "
        "--tokenizer-from {input.tokenizer:q} --out {output:q} > {log:q} 2>&1"
