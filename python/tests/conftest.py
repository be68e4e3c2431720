import numpy as np
import pytest

import vlc_compress as vc


def clustered(n, d, clusters, seed):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, d)).astype(np.float32) * 4
    pick = rng.integers(0, clusters, n)
    return (centres[pick] + rng.standard_normal((n, d)).astype(np.float32)).astype(np.float32)


@pytest.fixture(scope="session")
def data():
    x = clustered(6000, 32, 40, 1)
    q = clustered(50, 32, 40, 1)[:50] + 0.05
    return x, q.astype(np.float32)


@pytest.fixture(scope="session")
def compressor(data):
    x, _ = data
    c = vc.Compressor(anchors=64, bytes_per_vector=8, max_iters=10, pq_iters=8)
    c.train(x)
    return c


@pytest.fixture()
def index(compressor, data):
    x, _ = data
    ix = compressor.new_index()
    ix.add(x)
    return ix


def exact_knn(x, q, k):
    d2 = (q**2).sum(1)[:, None] - 2 * q @ x.T + (x**2).sum(1)[None, :]
    return np.argsort(d2, axis=1)[:, :k], np.sort(d2, axis=1)[:, :k]
