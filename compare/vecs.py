"""Reading .fvecs / .ivecs (per vector: int32 d, then d values), checked; numpy only, so
that scripts without FAISS can share it."""
import numpy as np


def read_vecs(path, dtype):
    a = np.fromfile(path, dtype=np.int32)
    if a.size == 0:
        raise ValueError(f"{path}: empty")
    d = int(a[0])
    if d <= 0 or a.size % (d + 1) != 0:
        raise ValueError(f"{path}: bad header d={d} for {a.size} words")
    a = a.reshape(-1, d + 1)
    if not np.all(a[:, 0] == d):
        raise ValueError(f"{path}: inconsistent per-vector dimensions")
    return np.ascontiguousarray(a[:, 1:].view(dtype))
