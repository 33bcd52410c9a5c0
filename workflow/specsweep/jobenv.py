"""The environment a Snakemake job runs in: the command every rule calls, and the one-line note that says
which interpreter that command will find.

A rule's shell command is ``python3 -m specsweep.cli ...`` resolved from the *job's* PATH, never the absolute
path of Snakemake's own Python: under ``--sdm conda`` Snakemake activates the rule's environment
(``envs/light.yaml``, ``envs/cpu.yaml`` or ``envs/gpu.yaml``) before the command runs, and that environment's
interpreter measures the cell. Without ``--sdm conda`` the job's environment is the one Snakemake was started
in (activate it first: ``source .venv/bin/activate`` or ``conda activate specsweep-cpu``).

``python3`` rather than ``python``: venvs and conda environments have both, a Debian system without
``python-is-python3`` has only ``python3``.

The checkout's own package directory is prepended to PYTHONPATH in the command, so a plain checkout (Snakemake
installed, ``pip install -e .`` never run) works, and the code that parsed the workflow is the code its jobs
run, whatever copy of specsweep an environment may also hold.
"""

from __future__ import annotations

import os
import shlex
import shutil

#: The interpreter name every rule's command resolves from the job's PATH.
INTERPRETER = "python3"


def cli_command(package_root: str) -> str:
    """The shell prefix of every rule: ``PYTHONPATH=<package_root>[:$PYTHONPATH] python3 -m specsweep.cli``.

    ``package_root`` is the folder that holds ``specsweep/`` (``{workflow.basedir}/workflow``), quoted for the
    shell. ``${PYTHONPATH:+:$PYTHONPATH}`` keeps what the environment already had (and is safe under
    ``set -u``, which Snakemake's bash runs with)."""
    return f"PYTHONPATH={shlex.quote(package_root)}${{PYTHONPATH:+:$PYTHONPATH}} {INTERPRETER} -m specsweep.cli"


def interpreter_note(managed: bool, snakemake_python: str, path: str | None = None) -> str | None:
    """One line for the person starting Snakemake when the jobs' interpreter is not Snakemake's own, or
    there is none; None when there is nothing to say.

    ``managed``: a deployment method (``--sdm conda``) sets each job's environment, so PATH now says nothing.
    ``path``: the PATH the jobs inherit (default: this process's)."""
    if managed:
        return None
    found = shutil.which(INTERPRETER, path=path if path is not None else os.environ.get("PATH", ""))
    if found is None:
        return (
            f"specsweep: note: no {INTERPRETER} on PATH, and every job runs `{INTERPRETER} -m specsweep.cli`"
            " from its own environment: activate the environment that holds vLLM (source .venv/bin/activate,"
            " conda activate specsweep-cpu) or pass --sdm conda"
        )
    if os.path.dirname(os.path.abspath(found)) != os.path.dirname(os.path.abspath(snakemake_python)):
        return (
            f"specsweep: note: jobs run {found} (the first {INTERPRETER} on PATH), not Snakemake's own "
            f"{snakemake_python}; activate the environment the cells should be measured in, or pass --sdm conda"
        )
    return None
