from specsweep.fetch import names_regex, stale_fetches


rule corpus:
    output:
        CORPUS,
    log:
        paths.log("corpus"),
    benchmark:
        paths.benchmark("corpus")
    priority: FIRST
    localrule: True
    conda:
        LIGHT_ENV
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
        paths.result(paths.WORKLOAD),
    log:
        paths.log(paths.WORKLOAD),
    benchmark:
        paths.benchmark(paths.WORKLOAD)
    priority: FIRST
    localrule: True
    conda:
        LIGHT_ENV
    params:
        cli=SPECSWEEP,
        config=EFFECTIVE_CONFIG,
    shell:
        "{params.cli} workload --config {params.config:q} --name {wildcards.workload:q} "
        "--corpus {input.corpus:q} --out {output:q} > {log:q} 2>&1"


# A fetched folder at another revision than the config pins would look up to date to Snakemake (mtime):
# refused here, at parse time, with one line.
try:
    stale_fetches(
        {n: (STUDY.models[n].hf_id, STUDY.models[n].revision) for n in FETCHED_MODELS}
    )
except SpecsweepError as exc:
    sys.exit(f"specsweep: error: {exc}")

# Models built by a recipe (build:) and models without weights (weights: dummy) share the output pattern
# resources/models/{model}; each rule is constrained to its own models.
RECIPE_MODELS = [m.name for m in STUDY.models.values() if m.build]
DUMMY_MODELS = [m.name for m in STUDY.models.values() if m.weights == "dummy"]
# SmolLM2-135M-Instruct's tokenizer alone: the tokenizer of every dummy model.
DUMMY_TOKENIZER = paths.DUMMY_TOKENIZER
NO_MATCH = "(?!)"
# The architectures live in the repository (absolute: the working directory may be elsewhere, -d).
ARCHITECTURES = os.path.join(workflow.basedir, "config", "architectures")


rule build_model:
    output:
        directory(paths.MODEL),
    log:
        paths.log(paths.BUILD_MODEL),
    benchmark:
        paths.benchmark(paths.BUILD_MODEL)
    wildcard_constraints:
        model="|".join(RECIPE_MODELS) or NO_MATCH,
    priority: FIRST
    conda:
        CONDA_ENV
    params:
        cli=SPECSWEEP,
        build=lambda wc: STUDY.models[wc.model].build,
        dtype=lambda wc: STUDY.models[wc.model].dtype or "float32",
    shell:
        "{params.cli} build-model --out {output:q} --build {params.build:q} --dtype {params.dtype:q} > {log:q} 2>&1"


# A Hugging Face model at its pinned revision: a CPU job without the gpu resource, run where Snakemake runs
# (localrule: on a cluster that is the login node, which has the network), atomic and resumable. Its token is
# the environment's HF_TOKEN (or `hf auth login`); the model id and revision come from the config, not the shell.
rule fetch_model:
    output:
        directory(paths.MODEL),
    log:
        paths.log(paths.FETCH_MODEL),
    benchmark:
        paths.benchmark(paths.FETCH_MODEL)
    wildcard_constraints:
        model=names_regex(FETCHED_MODELS),
    priority: FIRST
    localrule: True
    conda:
        CONDA_ENV
    params:
        cli=SPECSWEEP,
        config=EFFECTIVE_CONFIG,
        revision=lambda wc: STUDY.models[wc.model].revision,
    shell:
        "{params.cli} fetch-model --config {params.config:q} --name {wildcards.model:q} "
        "--out {output:q} > {log:q} 2>&1"


# SmolLM2-135M-Instruct's tokenizer alone (no weights): the tokenizer of every weights: dummy model.
rule dummy_tokenizer:
    output:
        directory(DUMMY_TOKENIZER),
    log:
        paths.log("build_model/dummy_tokenizer"),
    benchmark:
        paths.benchmark("build_model/dummy_tokenizer")
    priority: FIRST
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
        # relative: a copy of the working folder elsewhere must not see a changed input set
        architecture=lambda wc: os.path.relpath(
            os.path.join(
                ARCHITECTURES, STUDY.models[wc.model].architecture, "config.json"
            )
        ),
    output:
        directory(paths.MODEL),
    log:
        paths.log(paths.BUILD_MODEL),
    benchmark:
        paths.benchmark(paths.BUILD_MODEL)
    wildcard_constraints:
        model="|".join(DUMMY_MODELS) or NO_MATCH,
    priority: FIRST
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


# `snakemake prepare`: the workload files and model folders of the config, alone. Run it first where a run
# resumes without them (a fresh checkout or another node: they are not committed). Built in the same
# Snakemake run as the cells, a workload file made anew re-measures every cell that reads it; made before,
# it is older news (the cells' inputs are `ancient`) and only the missing cells run.
rule prepare:
    input:
        prepare_paths(),
    localrule: True
