"""vlc_compress: compact codes for float embeddings, and search over them.

    import vlc_compress as vc
    c = vc.Compressor(bytes_per_vector=16, anchors=256)
    c.train(x)
    index = c.new_index()
    index.add(x)
    D, I = index.search(q, 10, nprobe=16)

numpy in and out: float32 and float16 rows are read in place when C-contiguous, other
floats are converted. Every compute call releases the GIL.
"""

from __future__ import annotations

import enum

from ._native import Compressor, Context, Index, __version__, last_run_report, params as _params, statuses as _statuses
from .errors import (
    CancelledError,
    CodebookMismatchError,
    CorruptError,
    Error,
    InvalidArgumentError,
    InvalidStateError,
    OutOfMemoryError,
    TimedOutError,
)

#: The C ABI's statuses, by name (from the library itself).
Status = enum.IntEnum("Status", _statuses())  # type: ignore[misc]

#: The training parameters (id, name, whole, min, max, default, doc), from the library's table.
PARAMS = {p["name"]: p for p in _params()}

__all__ = [
    "CancelledError",
    "CodebookMismatchError",
    "Compressor",
    "Context",
    "CorruptError",
    "Error",
    "Index",
    "InvalidArgumentError",
    "InvalidStateError",
    "OutOfMemoryError",
    "PARAMS",
    "Status",
    "TimedOutError",
    "__version__",
    "last_run_report",
]
