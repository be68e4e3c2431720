"""Training, encode and decode, parameters, inputs as users have them, errors."""

import pickle

import numpy as np
import pytest

import vlc_compress as vc


def test_params_come_from_the_library_table():
    assert vc.PARAMS["bytes_per_vector"]["min"] == 1
    c = vc.Compressor(anchors=7, metric="cosine", bits=4)
    p = c.params
    assert (p["anchors"], p["metric"], p["bits"]) == (7, 2, 4)
    with pytest.raises(vc.InvalidArgumentError) as e:
        vc.Compressor(no_such_param=1)
    assert e.value.status == vc.Status.INVALID_ARGUMENT
    with pytest.raises(vc.InvalidArgumentError):
        vc.Compressor(bits=5.5)


def test_encode_decode_round_trip(compressor, data):
    x, _ = data
    codes = compressor.encode(x[:100])
    assert codes.dtype == np.uint8 and codes.shape == (100, compressor.code_size)
    y = compressor.decode(codes)
    assert y.shape == (100, 32) and y.dtype == np.float32
    a = compressor.anchors
    assert a.dtype == np.float32 and a.shape == (compressor.params["anchors"], 32)
    # Each decoded vector lies nearer its own anchor (the code's first byte) than x's mean.
    own = a[codes[:, 0]]
    assert ((y - own) ** 2).sum(1).mean() < ((y - x.mean(0)) ** 2).sum(1).mean()
    # Reconstruction is far closer than the data's spread.
    assert ((y - x[:100]) ** 2).sum(1).mean() < 0.5 * ((x[:100] - x.mean(0)) ** 2).sum(1).mean()


def test_inputs_float64_float16_strided_and_lists(compressor, data):
    x, _ = data
    want = compressor.encode(x[:64])
    assert (compressor.encode(x[:64].astype(np.float64)) == want).all()
    assert (compressor.encode(x[:64].tolist()) == want).all()
    wide = np.zeros((64, 64), np.float32)
    wide[:, ::2] = x[:64]
    assert (compressor.encode(wide[:, ::2]) == want).all()
    h = x[:64].astype(np.float16)
    assert (compressor.encode(h) == compressor.encode(h.astype(np.float32))).all()


def test_bad_inputs_raise_with_status(compressor, data):
    x, _ = data
    with pytest.raises(vc.InvalidArgumentError, match="2-D"):
        compressor.encode(x[0])
    bad = x[:4].copy()
    bad[1, 3] = np.nan
    with pytest.raises(vc.Error) as e:
        compressor.encode(bad)
    assert e.value.status_name == "NON_FINITE"
    with pytest.raises(vc.Error) as e:
        vc.Compressor().encode(x[:4])
    assert e.value.status == vc.Status.INVALID_STATE
    with pytest.raises(vc.InvalidArgumentError, match="bytes per row"):
        compressor.decode(np.zeros((2, 3), np.uint8))


def test_codebook_bytes_files_and_pickle(compressor, data, tmp_path):
    x, _ = data
    want = compressor.encode(x[:50])
    again = vc.Compressor.from_codebook(compressor.codebook_bytes())
    assert again.fingerprint == compressor.fingerprint
    assert (again.encode(x[:50]) == want).all()
    compressor.save_codebook(tmp_path / "cb.vlcc")
    assert (vc.Compressor.load_codebook(tmp_path / "cb.vlcc").encode(x[:50]) == want).all()
    assert (pickle.loads(pickle.dumps(compressor)).encode(x[:50]) == want).all()
    with pytest.raises(vc.CorruptError) as e:
        vc.Compressor.from_codebook(b"not a codebook")
    back = pickle.loads(pickle.dumps(e.value))
    assert type(back) is vc.CorruptError and back.status == e.value.status and str(back) == str(e.value)


def test_memory_estimate_and_cap(data):
    x, _ = data
    c = vc.Compressor(anchors=32, bytes_per_vector=8)
    host, device = c.estimate_memory(len(x), x.shape[1])
    assert host > x.nbytes and device >= 0
    ctx = vc.Context("cpu")
    ctx.memory_cap = host // 50  # far under even a tiled training's needs
    capped = vc.Compressor(ctx, anchors=32, bytes_per_vector=8)
    with pytest.raises(vc.OutOfMemoryError):
        capped.train(x)
    assert not capped.is_trained


def test_add_and_search_answer_to_the_cap(data):
    x, _ = data
    ctx = vc.Context("cpu")
    c = vc.Compressor(ctx, anchors=32, bytes_per_vector=8)
    c.train(x)
    build, device = c.estimate_memory(len(x), x.shape[1], work="build")
    assert build > len(x) * 8 and device == 0
    with pytest.raises(vc.InvalidArgumentError):
        c.estimate_memory(1, x.shape[1], work="dream")
    ix = c.new_index()
    ix.add(x)
    add, _ = ix.estimate_memory(len(x), work="build")
    search, _ = ix.estimate_memory(10, work="search", k=10)
    with pytest.raises(vc.InvalidArgumentError):
        ix.estimate_memory(1, work="train")
    ctx.device_memory_cap = 1  # nothing to cap on the CPU backend
    assert ctx.device_memory_cap == 1
    ctx.memory_cap = add // 2
    with pytest.raises(vc.OutOfMemoryError):
        ix.add(x)
    assert len(ix) == len(x)
    # A byte short of its estimate, a search has no room for its tables: it goes without them.
    ctx.memory_cap = search - 1
    got = ix.search(x[:10], 10)
    assert ix.stats()["table_bytes"] == 0
    ctx.memory_cap = 0
    want = ix.search(x[:10], 10)
    assert (got[0] == want[0]).all() and (got[1] == want[1]).all()


def test_error_code_by_name_and_number(data):
    x, q = data
    kw = dict(anchors=32, bytes_per_vector=8, max_iters=8, pq_iters=8)
    on = vc.Compressor(error_code="on", **kw)
    assert on.params["error_code"] == 2
    on.train(x)
    off = vc.Compressor(error_code=1, **kw)
    off.train(x)
    # The same bytes, another codebook.
    assert on.code_size == off.code_size
    assert on.fingerprint != off.fingerprint
    ix = on.new_index()
    ix.add(x)
    D, I = ix.search(x[:20], 5, nprobe=32)
    assert (I == np.arange(20)[:, None]).any(1).mean() >= 0.8
    with pytest.raises(vc.InvalidArgumentError):
        vc.Compressor(error_code="sometimes")
    # Inner product has no level: refused.
    with pytest.raises(vc.InvalidArgumentError):
        vc.Compressor(error_code="on", metric="ip", **kw).train(x)
