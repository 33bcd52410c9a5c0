"""Tables and figures are written as a set: a reader sees all old files or all new ones, never a mix."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import ROOT
from specsweep.errors import SpecsweepError
from specsweep.jsonio import recover_dir, staging_dir, swap_dir
from specsweep.tables import write_set


def test_a_failed_write_leaves_the_old_set(tmp_path):
    out = tmp_path / "tables"
    write_set(out, {"a.txt": b"old a", "b.txt": b"old b"}, "tables", "r")

    class Boom(dict):
        def items(self):
            yield "a.txt", b"new a"
            raise KeyboardInterrupt  # killed half-way through writing the new set

    with pytest.raises(KeyboardInterrupt):
        write_set(out, Boom(), "tables", "r")
    assert (out / "a.txt").read_bytes() == b"old a" and (out / "b.txt").read_bytes() == b"old b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tables"]  # no staging folder left behind


def test_a_kill_between_the_renames_is_recovered(tmp_path):
    out = tmp_path / "figs"
    write_set(out, {"f.png": b"old"}, "tables", "r")
    staged = staging_dir(out, "tables", "r")
    (staged / "f.png").write_bytes(b"new")
    os.replace(out, tmp_path / f".figs.old-{os.getpid()}")  # the first rename of swap_dir, then a kill
    assert not out.exists()
    recover_dir(out)  # what the next write (or reader) does first
    assert (out / "f.png").read_bytes() == b"old"
    swap_dir(staged, out)
    assert (out / "f.png").read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["figs"]


# ------------------------------------------------------------------------ what a set may replace (--out)

RUN = "h200-smollm2"


def _project(tmp_path: Path) -> Path:
    """A project folder holding the committed h200-smollm2 run (cells, archive, tables) and its figures."""
    for rel in (f"results/{RUN}/cells", f"results/{RUN}/archive", f"results/{RUN}/tables", f"figures/{RUN}"):
        shutil.copytree(ROOT / rel, tmp_path / rel)
    (tmp_path / "config").mkdir()
    shutil.copy(ROOT / "results" / RUN / "config.yaml", tmp_path / "config" / "h200.yaml")
    (tmp_path / "tok").mkdir()  # a tokenizer source for dummy-model (three tokens)
    (tmp_path / "tok" / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0, "b": 1, "c": 2}}}))
    (tmp_path / "tok" / "tokenizer_config.json").write_text("{}")
    return tmp_path


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _cli(capsys, *args: str) -> tuple[int, str]:
    from specsweep import cli

    code = cli.main(list(args))
    return code, capsys.readouterr().err


TABLES = ("tables", "--config", "config/h200.yaml", "--results", "results", "--out")
FIGURES = ("figures", "--config", "config/h200.yaml", "--tables", f"results/{RUN}/tables", "--out")
VALIDATE = ("validate", "--run", RUN, "--out")
DUMMY = ("dummy-model", "--architecture", "opt-125m", "--tokenizer-from", "tok", "--out")


@pytest.mark.parametrize(
    "args,what",
    [
        ((*TABLES, f"results/{RUN}"), "no manifest in it says it is specsweep's tables"),  # `/tables` forgotten
        ((*TABLES, "."), "no manifest in it says it is specsweep's tables"),  # the whole project
        ((*TABLES, "figures"), "no manifest in it says it is specsweep's tables"),
        ((*TABLES, f"results/{RUN}/cells"), "no manifest in it says it is specsweep's tables"),
        ((*TABLES, f"figures/{RUN}"), "it holds specsweep's figures, not tables"),
        ((*FIGURES, "figures"), "no manifest in it says it is specsweep's figures"),
        ((*FIGURES, f"results/{RUN}/tables"), "it holds specsweep's tables, not figures"),
        ((*FIGURES, "."), "no manifest in it says it is specsweep's figures"),
        ((*VALIDATE, f"results/{RUN}"), "no manifest in it says it is specsweep's validation"),
        ((*VALIDATE, f"results/{RUN}/tables"), "it holds specsweep's tables, not validation"),
        ((*VALIDATE, "."), "no manifest in it says it is specsweep's validation"),
        ((*DUMMY, f"results/{RUN}"), "no manifest in it says it is specsweep's model"),
        ((*DUMMY, "."), "no manifest in it says it is specsweep's model"),
    ],
    ids=lambda v: "-".join(v[::-1][:1] + v[:1]) if isinstance(v, tuple) else None,
)
def test_an_out_that_is_not_the_commands_output_is_refused(tmp_path, monkeypatch, capsys, args, what):
    """A mistyped --out (the run folder, the project, figures/, the cells) is one line naming it, exit 2, and
    every file of the project is left as it was (such a folder was swapped out and removed)."""
    project = _project(tmp_path)
    monkeypatch.chdir(project)
    before = _snapshot(project)
    code, err = _cli(capsys, *args)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"specsweep: error: output folder {args[-1]}: exists and {what}; nothing replaced"), err
    assert _snapshot(project) == before


def test_an_out_of_the_same_kind_and_run_is_replaced(tmp_path, monkeypatch, capsys):
    """The command's own output of the same run is replaced (and so are a new and an empty folder); its
    manifest names the kind and the run, and tables of another run in the way are refused."""
    project = _project(tmp_path)
    monkeypatch.chdir(project)
    tables = project / "results" / RUN / "tables"
    (tables / "stale.txt").write_text("left by hand")
    assert _cli(capsys, *TABLES, f"results/{RUN}/tables") == (0, "")
    manifest = json.loads((tables / "MANIFEST.json").read_text())
    assert (manifest["kind"], manifest["run"]) == ("tables", RUN) and "cells.parquet" in manifest["files"]
    assert not (tables / "stale.txt").exists()
    (project / "empty").mkdir()
    for out in ("empty", "new/tables"):
        assert _cli(capsys, *TABLES, out) == (0, "")
    write_set(project / "other", {"cells.parquet": b"x"}, "tables", "another-run")
    code, err = _cli(capsys, *TABLES, "other")
    assert code == 2 and "it holds the tables of run 'another-run', not of run 'h200-smollm2'" in err
    assert (project / "other" / "cells.parquet").read_bytes() == b"x"


def test_an_out_holding_only_empty_folders_is_replaced(tmp_path, monkeypatch, capsys):
    """Snakemake makes the folders of a rule's outputs before its job runs (figures/{run}/captions/ for the
    figures rule), so a first `figures --out` finds its folder holding an empty folder: nothing to lose, it is
    replaced. A folder holding a file, or a link, deeper down is still refused."""
    project = _project(tmp_path)
    monkeypatch.chdir(project)
    (project / "first" / "captions").mkdir(parents=True)
    assert _cli(capsys, *FIGURES, "first") == (0, "")
    assert json.loads((project / "first" / "manifest.json").read_text())["kind"] == "figures"
    (project / "deep" / "a" / "b").mkdir(parents=True)
    (project / "deep" / "a" / "b" / "notes.txt").write_text("mine")
    (project / "linked" / "a").mkdir(parents=True)
    (project / "linked" / "a" / "to").symlink_to(project / "results")
    for out in ("deep", "linked"):
        code, err = _cli(capsys, *FIGURES, out)
        assert code == 2 and f"output folder {out}: exists and no manifest in it says" in err, err
    assert (project / "deep" / "a" / "b" / "notes.txt").read_text() == "mine"
    assert (project / "linked" / "a" / "to").is_symlink()


def test_sets_written_before_manifests_named_their_kind(tmp_path):
    """A tables or validation folder whose MANIFEST.json only lists file hashes, and figures whose manifest
    has no kind, are still recognised as what they are (their run unknown, or the figures')."""
    from specsweep.jsonio import check_replaceable, set_identity

    sha = "0" * 64
    for name, listed, kind in (("t", "cells.parquet", "tables"), ("v", "validation.md", "validation")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "MANIFEST.json").write_text(json.dumps({listed: sha}))
        assert set_identity(tmp_path / name) == (kind, None)
        check_replaceable(tmp_path / name, kind, "any-run")
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "manifest.json").write_text(json.dumps({"run": "r", "figures": {}}))
    assert set_identity(tmp_path / "f") == ("figures", "r")
    for bad in ("[]", '{"cells.parquet": "not a hash"}', "{trunc"):
        (tmp_path / "t" / "MANIFEST.json").write_text(bad)
        assert set_identity(tmp_path / "t") is None
        with pytest.raises(SpecsweepError, match="no manifest in it says it is specsweep's tables"):
            check_replaceable(tmp_path / "t", "tables", "r")
