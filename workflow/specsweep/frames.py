"""The tables as pandas reads them: ``pd.read_parquet("results/<run>/tables/cells.parquet")`` is a user's first
move, and it should give each column the type the tables mean, not the type pyarrow guesses from its nulls.

Without a hint pyarrow turns an integer column with a null (``drafts`` of a baseline row, the counts of a missing
cell) into float64 and a boolean column with a null into object. Each table therefore carries pandas' own
schema metadata (the ``pandas`` key, as ``DataFrame.to_parquet`` writes it), written here from the Arrow
schema alone, so that it is deterministic and the same for every pandas version:

    int64            -> Int64 (nullable; a missing count is <NA>, never NaN)
    bool             -> boolean (nullable)
    float64          -> float64 (NaN for missing)
    string           -> object (str or None)
    list<int64>      -> object (each value an int64 array, or None)

pyarrow (``to_pylist``, ``read_table``) ignores the key; only the conversion to pandas reads it.
"""

from __future__ import annotations

import json

import pyarrow as pa

#: Arrow type -> (pandas_type, numpy_type) in pandas' metadata format.
_PANDAS = {
    pa.int64(): ("int64", "Int64"),
    pa.bool_(): ("bool", "boolean"),
    pa.float64(): ("float64", "float64"),
    pa.string(): ("unicode", "object"),
    pa.list_(pa.int64()): ("list[int64]", "object"),
}


def pandas_metadata(schema: pa.Schema) -> bytes:
    """The ``pandas`` schema metadata for a table of ``schema`` (no index)."""
    columns = []
    for field in schema:
        if field.type not in _PANDAS:
            raise TypeError(f"column {field.name}: no pandas type for Arrow type {field.type}")
        pandas_type, numpy_type = _PANDAS[field.type]
        columns.append(
            {
                "name": field.name,
                "field_name": field.name,
                "pandas_type": pandas_type,
                "numpy_type": numpy_type,
                "metadata": None,
            }
        )
    doc = {
        "index_columns": [],
        "column_indexes": [],
        "columns": columns,
        "attributes": {},
        "creator": {"library": "specsweep"},
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
