"""pandas where users are: `pd.read_parquet` on the tables of the committed H200 cells gives
each column the type the tables mean (counts stay integers when some are missing, booleans stay booleans)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from conftest import ROOT
from specsweep import cli
from specsweep.frames import pandas_metadata
from specsweep.tables import CELL_COLUMNS, MEASUREMENT_COLUMNS, SPEEDUP_COLUMNS

PANDAS_DTYPE = {
    pa.int64(): "Int64",
    pa.float64(): "float64",
    pa.string(): "object",
    pa.bool_(): "boolean",
    pa.list_(pa.int64()): "object",
}


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """`specsweep tables --config results/h200-smollm2/config.yaml --out <tmp>` on the committed cells (12 of 90 measured)."""
    out = tmp_path_factory.mktemp("tables")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        assert cli.main(["tables", "--config", "results/h200-smollm2/config.yaml", "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize(
    "name, columns", [("measurements", MEASUREMENT_COLUMNS), ("cells", CELL_COLUMNS), ("speedup", SPEEDUP_COLUMNS)]
)
def test_every_column_reads_as_its_meant_type(tables, name, columns):
    df = pd.read_parquet(tables / f"{name}.parquet")
    assert list(df.columns) == [n for n, _ in columns]
    for col, arrow_type in columns:
        assert str(df[col].dtype) == PANDAS_DTYPE[arrow_type], f"{name}.{col}: {df[col].dtype}"


def test_cells_table_in_pandas(tables):
    cells = pd.read_parquet(tables / "cells.parquet")
    assert len(cells) == 30
    assert cells["output_tok_s_median"].dtype == np.float64
    assert pd.api.types.is_integer_dtype(cells["n"]) and cells["n"].sum() == 12
    for col in ("model", "workload", "config", "method", "status"):
        assert cells[col].dtype == object and all(isinstance(v, str) for v in cells[col]), col
    ngram = cells[(cells.config == "ngram") & (cells.n > 0)]
    vanilla = cells[(cells.config == "vanilla") & (cells.n > 0)]
    assert len(ngram) == len(vanilla) == 6
    # counts: integers where measured, <NA> (not NaN) where the step drafts nothing
    assert pd.api.types.is_integer_dtype(cells["drafts"]) and vanilla["drafts"].isna().all()
    assert all(isinstance(v, (int, np.integer)) for v in ngram["drafts"])
    # accepted per draft position: an int64 array per speculative cell, summing to its accepted tokens
    for pos, accepted in zip(ngram["accepted_per_pos"], ngram["accepted"], strict=True):
        assert isinstance(pos, np.ndarray) and pos.dtype == np.int64 and len(pos) == 7
        assert int(pos.sum()) == accepted
    assert vanilla["accepted_per_pos"].isna().all()
    assert cells["async_scheduling"].dtype == "boolean"
    # the Arrow-backed reading keeps the list type itself
    arrow = pd.read_parquet(tables / "cells.parquet", dtype_backend="pyarrow")
    assert str(arrow["accepted_per_pos"].dtype).startswith("list<")


def test_a_pandas_aggregation_agrees_with_the_tables(tables):
    """A user's own groupby over the measurements gives the cells table's medians and counts."""
    m = pd.read_parquet(tables / "measurements.parquet")
    cells = pd.read_parquet(tables / "cells.parquet").set_index(["model", "workload", "config"])
    assert pd.api.types.is_integer_dtype(m["repeat"]) and pd.api.types.is_integer_dtype(m["prompts"])
    assert m["prompts"].isna().sum() == 78 and (m.loc[m.status == "ok", "prompts"] == 512).all()
    ok = m[m.status == "ok"]
    mine = ok.groupby(["model", "workload", "config"]).agg(n=("repeat", "size"), tok_s=("output_tok_s", "median"))
    assert len(mine) == 12
    pd.testing.assert_series_equal(mine["tok_s"], cells.loc[mine.index, "output_tok_s_median"], check_names=False)
    assert (mine["n"] == cells.loc[mine.index, "n"]).all()
    speedup = pd.read_parquet(tables / "speedup.parquet")
    sp = speedup[speedup.status != "missing"].set_index(["model", "workload", "config"])
    assert len(sp) == 6 and sp["speedup"].dtype == np.float64
    ratio = (
        cells.loc[sp.index, "output_tok_s_median"].to_numpy()
        / cells.loc[[(m_, w, "vanilla") for m_, w, _ in sp.index], "output_tok_s_median"].to_numpy()
    )
    np.testing.assert_allclose(sp["speedup"].to_numpy(), ratio, rtol=1e-12)


def test_pandas_metadata_refuses_a_type_it_does_not_map():
    with pytest.raises(TypeError, match="column t: no pandas type"):
        pandas_metadata(pa.schema([pa.field("t", pa.timestamp("s"))]))
