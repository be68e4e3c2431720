"""How many points Hamerly-style bounds would let the annealed k-means skip (notes/perf-cuda.md,
CUDA version 15). A NumPy model of the loop: a Gaussian mixture like `vlcc bench --clusters`
(centres spread 4, unit noise), sampled start, balancing bias 0.3 x heat x energy x
(count / mean - 1) with heat 0.9^t until the last fifth, plain means. After each update every
point keeps an exact upper bound (its distance to its own anchor) and a lower bound on the
others (the last second-nearest distance minus the largest move among all but the `jumpers`
anchors that moved most; those are scored exactly). A point may be skipped when
upper^2 + bias[own] < lower^2 + smallest other bias. Prints the share of points that could
not be skipped per iteration, and checks that no skipped point changed anchor.
Usage: python3 notes/scripts/sim_bounds.py [N D CLUSTERS ANCHORS ITERS JUMPERS]  (50000 128 64 256 25 32)"""
import sys
import numpy as np

n, d, C, k, iters, J = (list(map(int, sys.argv[1:7])) + [50000, 128, 64, 256, 25, 32][len(sys.argv) - 1:])[:6]
rng = np.random.default_rng(1)
cent = rng.standard_normal((C, d)).astype(np.float32) * 4
x = cent[(np.arange(n) * 7919) % C] + rng.standard_normal((n, d)).astype(np.float32)
xn = (x * x).sum(1)
c = x[rng.choice(n, k, replace=False)].copy()
quench = iters - max(iters // 5, 1)
bias = np.zeros(k, np.float32)


def assign(c, bias):
    """Biased argmin; the own distance and the nearest other distance (unbiased)."""
    dist = np.maximum(xn[:, None] + (c * c).sum(1)[None, :] - 2 * x @ c.T, 0)
    a = (dist + bias[None, :]).argmin(1)
    own = dist[np.arange(n), a].copy()
    dist[np.arange(n), a] = np.inf
    return a, np.sqrt(own), np.sqrt(dist.min(1))


a, lower = None, None
for it in range(iters):
    heat = 0.9 ** it if it < quench else 0.0
    new_a, _, new_lower = assign(c, bias)
    active = 1.0
    if a is not None:
        upper = np.sqrt(((x - c[a]) ** 2).sum(1))
        order = np.argsort(bias)
        other = np.where(a == order[0], bias[order[1]], bias[order[0]])
        lo = np.maximum(lower, 0)
        skip = upper * upper + bias[a] < lo * lo + other
        assert (new_a[skip] == a[skip]).all(), "a skipped point changed anchor"
        active = 1 - skip.mean()
    a, lower = new_a, new_lower
    counts = np.bincount(a, minlength=k)
    energy = (((x - c[a]) ** 2).sum(1)).mean()
    sums = np.zeros((k, d))
    np.add.at(sums, a, x)
    moved = c.copy()
    nz = counts > 0
    moved[nz] = (sums[nz] / counts[nz, None]).astype(np.float32)
    drift = np.sqrt(((moved - c) ** 2).sum(1))
    jump = np.argsort(drift)[::-1][:J]
    rest = np.delete(drift, jump).max() if J < k else 0.0
    lower = lower - rest
    if J > 0:
        dj = np.sqrt(((x[:, None, :] - moved[None, jump, :]) ** 2).sum(2))
        dj[a[:, None] == jump[None, :]] = np.inf
        lower = np.minimum(lower, dj.min(1))
    c = moved
    bias = (0.3 * heat * energy * (counts / (n / k) - 1)).astype(np.float32)
    print(f"iteration {it:2d}: heat {heat:.3f}, energy {energy:.3f}, not skippable {active:.3f}")
