"""Index: FAISS-shaped search, filters, re-rank, bounds, range, remove, merge, files."""

import pickle

import numpy as np
import pytest

import vlc_compress as vc
from conftest import exact_knn


def test_search_shape_recall_and_padding(index, data):
    x, q = data
    D, I = index.search(q, 10, nprobe=16)
    assert D.shape == I.shape == (len(q), 10) and I.dtype == np.int64 and D.dtype == np.float32
    gt, _ = exact_knn(x, q, 10)
    recall = np.mean([len(set(I[i]) & set(gt[i])) / 10 for i in range(len(q))])
    assert recall > 0.5
    assert (np.diff(D, axis=1) >= 0).all()
    # Fewer vectors than k: the rest are -1.
    small = index
    small.remove(np.arange(10, len(x)))
    D, I = small.search(q[:3], 20, nprobe=64)
    assert (I[:, 10:] == -1).all() and np.isnan(D[:, 10:]).all()


def test_exact_rotation_keeps_the_results():
    # 128-d at 8 B (under a bit a dimension): a CPU with AVX-512 VNNI rotates the queries in
    # integers unless told not to; either way nearly the same neighbours come back.
    x = np.random.default_rng(3).standard_normal((4000, 128)).astype(np.float32)
    ctx = vc.Context(threads=2)
    assert ctx.exact_rotation is False
    c = vc.Compressor(context=ctx, anchors=32, bytes_per_vector=8, max_iters=5, pq_iters=5)
    c.train(x)
    ix = c.new_index()
    ix.add(x)
    q = x[:40] + 0.01
    _, fast = ix.search(q, 10, nprobe=8)
    ctx.exact_rotation = True
    assert ctx.exact_rotation is True
    _, exact = ix.search(q, 10, nprobe=8)
    same = np.mean([len(set(fast[i]) & set(exact[i])) / 10 for i in range(len(q))])
    assert same >= 0.9


def test_rerank_against_array_fetch_and_own_rows(compressor, index, data):
    x, q = data
    gt, gd = exact_knn(x, q, 5)
    D, I = index.search(q, 5, nprobe=64, rerank=50, raw=x)
    D2, I2 = index.search(q, 5, nprobe=64, rerank=50, raw=lambda ids: x[ids])
    assert (I == I2).all() and np.allclose(D, D2)
    assert np.mean(I == gt) > 0.9
    own = compressor.new_index(refine="f16")
    own.add(x)
    D3, I3 = own.search(q, 5, nprobe=64, rerank=50)
    assert np.mean(I3 == I) > 0.95
    with pytest.raises(vc.Error) as e:
        index.search(q, 5, rerank=10, raw=lambda ids: x[ids][:, :3])
    assert e.value.status_name == "CALLBACK_FAILED"


def test_filters_ids_mask_callable(index, data):
    _, q = data
    allowed = np.arange(0, 6000, 7)
    for f in (allowed[::-1].copy(), np.isin(np.arange(6000), allowed), lambda i: i % 7 == 0):
        D, I = index.search(q, 10, nprobe=32, filter=f)
        assert (I[I >= 0] % 7 == 0).all() and (I >= 0).sum() > 0
    with pytest.raises(vc.Error) as e:
        index.search(q, 10, filter=lambda i: 1 / 0)
    assert e.value.status_name == "CALLBACK_FAILED"


def test_bounds_and_certified_rerank(compressor, data):
    x, q = data
    ix = compressor.new_index(refine="bound")
    ix.add(x)
    D, I, lo, hi, cert = ix.search_bounded(q, 5, nprobe=8)
    ok = I >= 0
    assert (lo[ok] <= D[ok] + 1e-3).all() and (D[ok] <= hi[ok] + 1e-3).all()
    D, I, lo, hi, cert = ix.search_bounded(q, 5, nprobe=8, rerank=500, raw=x, auto=True)
    assert cert.dtype == bool and cert.mean() > 0.5
    with pytest.raises(vc.Error) as e:
        compressor.new_index().search_bounded(q, 5)
    assert e.value.status == vc.Status.INVALID_STATE


def test_range_search_matches_search(index, data):
    _, q = data
    D, I = index.search(q[:5], 5, nprobe=16)
    lims, RD, RI = index.range_search(q[:5], float(D[:, -1].max()), nprobe=16)
    assert lims.shape == (6,) and lims[-1] == len(RI) == len(RD)
    for i in range(5):
        assert set(I[i]) <= set(RI[lims[i] : lims[i + 1]])


def test_remove_contains_reconstruct(index, compressor, data):
    x, _ = data
    assert 5 in index
    assert index.remove([5, 6, 10**9]) == 2 and 5 not in index and len(index) == len(x) - 2
    y = index.reconstruct([7])
    assert np.allclose(y, compressor.decode(compressor.encode(x[7:8])), atol=1e-5)
    codes = index.get_codes([7, 8])
    assert codes.dtype == np.uint8 and codes.shape == (2, compressor.code_size)
    assert (codes == compressor.encode(x[7:9])).all()
    with pytest.raises(vc.InvalidArgumentError):
        index.get_codes([5])
    with pytest.raises(vc.InvalidArgumentError, match="negative"):
        index.remove(np.array([-1]))


def test_merge_and_codebook_mismatch(compressor, data):
    x, q = data
    a, b = compressor.new_index(), compressor.new_index()
    a.add(x[:3000])
    b.add(x[3000:], ids=np.arange(3000, 6000))
    a.merge(b)
    whole = compressor.new_index()
    whole.add(x)
    assert len(a) == 6000 and len(b) == 3000
    assert (np.sort(a.search(q, 10)[1], 1) == np.sort(whole.search(q, 10)[1], 1)).all()
    other = vc.Compressor(anchors=16, bytes_per_vector=8, seed=9)
    other.train(x)
    with pytest.raises(vc.CodebookMismatchError):
        a.merge(other.new_index())


def test_files_bytes_pickle_and_mmap(index, data, tmp_path):
    _, q = data
    want = index.search(q, 10)
    path = tmp_path / "ix.vlcc"
    index.save(path)
    for loaded in (
        vc.Index.load(path),
        vc.Index.load(path, mmap=False),
        vc.Index.load(path, verify=False),
        vc.Index.from_bytes(index.to_bytes()),
        pickle.loads(pickle.dumps(index)),
    ):
        got = loaded.search(q, 10)
        assert (got[1] == want[1]).all() and np.allclose(got[0], want[0])
    lazy = vc.Index.load(path, verify=False)
    assert lazy.stats()["memory_mapped"]
    lazy.verify()
    raw = bytearray(path.read_bytes())
    raw[-100] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(vc.CorruptError):
        vc.Index.load(path)
    with pytest.raises(vc.CorruptError):
        vc.Index.load(path, verify=False).verify()


def test_stats_by_part(index):
    s = index.stats()
    assert s["vectors"] == 6000 and s["code_bytes"] == 6000 * 8 and s["id_bytes"] == 6000 * 8
