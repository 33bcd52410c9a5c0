"""Tables and figures are written as a set: a reader sees all old files or all new ones, never a mix."""

from __future__ import annotations

import os

import pytest

from specsweep.jsonio import recover_dir, staging_dir, swap_dir
from specsweep.tables import write_set


def test_a_failed_write_leaves_the_old_set(tmp_path):
    out = tmp_path / "tables"
    write_set(out, {"a.txt": b"old a", "b.txt": b"old b"})

    class Boom(dict):
        def items(self):
            yield "a.txt", b"new a"
            raise KeyboardInterrupt  # killed half-way through writing the new set

    with pytest.raises(KeyboardInterrupt):
        write_set(out, Boom())
    assert (out / "a.txt").read_bytes() == b"old a" and (out / "b.txt").read_bytes() == b"old b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tables"]  # no staging folder left behind


def test_a_kill_between_the_renames_is_recovered(tmp_path):
    out = tmp_path / "figs"
    write_set(out, {"f.png": b"old"})
    staged = staging_dir(out)
    (staged / "f.png").write_bytes(b"new")
    os.replace(out, tmp_path / f".figs.old-{os.getpid()}")  # the first rename of swap_dir, then a kill
    assert not out.exists()
    recover_dir(out)  # what the next write (or reader) does first
    assert (out / "f.png").read_bytes() == b"old"
    swap_dir(staged, out)
    assert (out / "f.png").read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["figs"]
