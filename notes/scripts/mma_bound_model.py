"""Checks the error bound of the WGPU cooperative-matrix assignment (kernels/wgpu/mma.wgsl) in
numpy: rows and anchors scaled by powers of two and rounded to fp16 as `halves` does, each
row's rounding error measured, the fp16 dot products taken exactly, and per row the test the
kernel makes. Every row the test decides must have the winner of the exact scores.

    python3 notes/scripts/mma_bound_model.py      # needs numpy
"""
import numpy as np


def halves(x):
    """fp16 values of the scaled rows, the unscale, the relative rounding error, the norm."""
    mx = np.abs(x).max(1)
    e = ((mx.astype(np.float32).view(np.uint32) >> 23) & 0xFF).astype(np.int64)
    s = np.clip(141 - e, -126, 126)
    y = (x * np.ldexp(1.0, s).astype(np.float32)[:, None]).astype(np.float32)
    v = y.astype(np.float16).astype(np.float32)
    v[np.abs(y) < 2.0**-14] = 0
    n2 = (y.astype(np.float64) ** 2).sum(1)
    e2 = ((y - v).astype(np.float64) ** 2).sum(1)
    rel = np.where(n2 > 0, np.sqrt(e2 / np.maximum(n2, 1e-300)) * 1.001, 0)
    un = np.ldexp(1.0, -s)
    return v.astype(np.float64), un, rel, np.sqrt(n2) * un


def main():
    rng = np.random.default_rng(1)
    rows = decided = wrong = 0
    for trial in range(200):
        n = int(rng.integers(50, 400))
        d = int(rng.choice([3, 8, 37, 128]))
        k = int(rng.integers(2, 300))
        x = rng.standard_normal((n, d)).astype(np.float32) * float(rng.choice([1e-3, 1, 30]))
        # Anchors near points: many near-ties.
        c = x[rng.integers(0, n, k)] + 0.01 * rng.standard_normal((k, d)).astype(np.float32)
        bias = rng.random(k) * 0.1 if trial % 2 else np.zeros(k)
        off = (c.astype(np.float64) ** 2).sum(1) + bias
        xv, ux, ex, xn = halves(x)
        cv, uc, ec, cn = halves(c)
        s = off[None, :] - 2 * (xv @ cv.T) * ux[:, None] * uc[None, :]
        delta = 2.0**-20 + d * 2.0**-22
        bound = 2 * xn[:, None] * cn[None, :] * (ex[:, None] + delta + ec[None, :])
        bound += np.abs(off)[None, :] * 2.0**-22
        at = s.argmin(1)
        i = np.arange(n)
        hi = s[i, at] + bound[i, at]
        lo = s - bound
        lo[i, at] = np.inf
        ok = lo.min(1) > hi
        exact = off[None, :] - 2 * (x.astype(np.float64) @ c.T.astype(np.float64))
        rows += n
        decided += ok.sum()
        wrong += (ok & (exact.argmin(1) != at)).sum()
    print(f"rows {rows}, decided by the bound {decided}, of those wrong {wrong}")
    assert wrong == 0


if __name__ == "__main__":
    main()
