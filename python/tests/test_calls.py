"""Long calls under the caller's control: progress, cancel, the GIL released."""

import threading
import time

import numpy as np
import pytest

import vlc_compress as vc


def test_progress_reports_phases(data):
    x, _ = data
    seen = []
    c = vc.Compressor(anchors=32, bytes_per_vector=8, max_iters=5)
    c.train(x, progress=lambda phase, done, total: seen.append((phase, done, total)))
    assert {"anchors", "codebooks"} <= {p for p, _, _ in seen}
    assert all(0 <= d <= t for _, d, t in seen)


def test_cancel_leaves_objects_as_they_were(compressor, data):
    x, q = data
    c = vc.Compressor(anchors=32, bytes_per_vector=8)
    with pytest.raises(vc.CancelledError) as e:
        c.train(x, progress=lambda *a: True)
    assert e.value.status == vc.Status.CANCELLED and not c.is_trained
    ix = compressor.new_index()
    ix.add(x[:1000])
    before = ix.to_bytes()
    with pytest.raises(vc.CancelledError):
        ix.add(x, progress=lambda phase, done, total: done > 0)
    assert ix.to_bytes() == before
    other = compressor.new_index()
    other.add(x[:500], ids=np.arange(10**6, 10**6 + 500))
    with pytest.raises(vc.CancelledError):
        ix.merge(other, progress=lambda *a: True)
    assert ix.to_bytes() == before
    ix.set_progress(lambda *a: True)
    with pytest.raises(vc.CancelledError):
        ix.add(x[:10])
    ix.set_progress(None)
    ix.add(x[:10], ids=np.arange(2000, 2010))
    assert len(ix) == 1010


def test_exception_in_callback_cancels_and_is_raised(data):
    x, _ = data
    c = vc.Compressor(anchors=32, bytes_per_vector=8)

    def boom(*a):
        raise KeyError("stop here")

    with pytest.raises(KeyError, match="stop here"):
        c.train(x, progress=boom)
    assert not c.is_trained
    with pytest.raises(vc.InvalidArgumentError):
        c.train(x, progress=42)


def test_context_progress_applies_to_calls_without_their_own(data):
    x, _ = data
    ctx = vc.Context("cpu", threads=2)
    calls = []
    ctx.set_progress(lambda *a: calls.append(a))
    c = vc.Compressor(ctx, anchors=16, bytes_per_vector=8, max_iters=3)
    c.train(x)
    assert calls and ctx.backend == "cpu" and ctx.threads == 2


def test_search_releases_the_gil(index, data):
    """Another Python thread runs while a search computes: its counting rate during the
    search is a good part of its rate alone (a held GIL would stop it for the whole call)."""
    x, _ = data
    q = np.repeat(x[:500], 8, axis=0)
    index.search(q[:10], 10, nprobe=64)

    def count_for(stop):
        n = 0
        while not stop():
            n += 1
        return n

    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    t0 = time.perf_counter()
    alone = count_for(stop.is_set) / (time.perf_counter() - t0)
    done = threading.Event()
    worker = threading.Thread(target=lambda: (index.search(q, 10, nprobe=64), done.set()))
    t0 = time.perf_counter()
    worker.start()
    counted = count_for(done.is_set)
    elapsed = time.perf_counter() - t0
    worker.join()
    assert elapsed > 0.05, "the search was too short to tell"
    assert counted > 0.2 * alone * elapsed, (counted, alone, elapsed)
