# specsweep: vLLM's built-in speculative decoding, measured cell by cell.
#   snakemake --cores 1 --resources gpu=8                         the paper matrix (config/config.yaml, 156 cells)
#   snakemake --profile profiles/cpu                              the CPU profile (config/smoke.yaml, 6 cells x 3)
#   snakemake figures                                             tables + figures from the cells that exist
#   snakemake preflight --configfile config/preflight.yaml        every cell tried on random weights first
from snakemake.utils import min_version

min_version("9.0")


# The paper study, unless --configfile names another study (which then replaces it, not extends it).
if not workflow.overwrite_configfiles:

    configfile: f"{workflow.basedir}/config/config.yaml"


# The report's front page (snakemake --report report.html); each figure's caption is workflow/report/{figure}.rst.
report: "workflow/report/workflow.rst"


# The package lives in workflow/specsweep, first on the path before anything imports it: a plain checkout
# works, and this checkout's package wins over one installed from another checkout (pip install -e).
import sys  # noqa: E402

sys.path.insert(0, f"{workflow.basedir}/workflow")


# docutils renders the report's RST: raw HTML off (workflow/report/docutils.conf), read after any config the
# user's DOCUTILSCONFIG names, so that it wins (specsweep.captions.use_report_docutils_config).
from specsweep.captions import use_report_docutils_config  # noqa: E402

use_report_docutils_config(f"{workflow.basedir}/workflow/report/docutils.conf")


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/cells.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/preflight.smk"


rule all:
    default_target: True
    input:
        cell_paths(),
        table_paths(),
        figure_paths(),
        crossmodel_paths(),
