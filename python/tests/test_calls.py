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


def _in_time(f, seconds=60):
    """Runs f on a thread and returns what it raised (None if nothing), failing the test if
    it has not ended in time: a deadlock would otherwise hang the suite."""
    out = {}

    def run():
        try:
            f()
            out["raised"] = None
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            out["raised"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the call deadlocked"
    return out["raised"]


def test_a_callback_that_changes_its_own_index_gets_an_error(compressor, data):
    x, q = data
    ix = compressor.new_index()
    ix.add(x[:1000])
    before = ix.to_bytes()
    # A progress callback of add that adds to (or reads) the index being changed.
    for again in (lambda: ix.add(x[:10]), lambda: len(ix), lambda: ix.search(q, 5)):
        e = _in_time(lambda: ix.add(x, progress=lambda *a: again()))
        assert isinstance(e, vc.InvalidStateError) and "in use" in str(e), repr(e)
        assert ix.to_bytes() == before
    # A filter of a search that removes from (or adds to) the index it filters.
    for change in (lambda: ix.remove([1]), lambda: ix.add(x[:1])):
        e = _in_time(lambda: ix.search(q, 5, filter=lambda i: change() or True))
        assert isinstance(e, vc.Error) and "in use" in str(e), repr(e)
    assert ix.to_bytes() == before
    # Reading it from a search's own callbacks is fine: searches share it.
    D, I = ix.search(q, 5, filter=lambda i: len(ix) > 0)
    assert (I >= 0).all()
    # Training's callback retraining its own compressor.
    c = vc.Compressor(anchors=32, bytes_per_vector=8, max_iters=5)
    e = _in_time(lambda: c.train(x, progress=lambda *a: c.train(x[:100])))
    assert isinstance(e, vc.InvalidStateError), repr(e)
    assert not c.is_trained


def test_searches_report_cancel_and_time_out(compressor, index, data):
    x, _ = data
    q = np.repeat(x[:500], 4, axis=0)
    bounded = compressor.new_index(refine="bound")
    bounded.add(x)
    seen = []
    D, I = index.search(q, 5, nprobe=32, progress=lambda *a: seen.append(a))
    assert seen and all(p == "search" and 0 <= d <= t == len(q) for p, d, t in seen)
    assert seen[-1][1] == len(q)
    assert (I == index.search(q, 5, nprobe=32)[1]).all()
    for call in (
        lambda **w: index.search(q, 5, nprobe=64, **w),
        lambda **w: index.range_search(q, 1e30, nprobe=64, **w),
        lambda **w: bounded.search_bounded(q, 5, nprobe=64, **w),
    ):
        with pytest.raises(vc.CancelledError):
            call(progress=lambda *a: True)
        with pytest.raises(KeyError, match="from the callback"):
            call(progress=lambda *a: (_ for _ in ()).throw(KeyError("from the callback")))
        # A callback slow enough that a millisecond's timeout passes.
        with pytest.raises(vc.TimedOutError) as e:
            call(progress=lambda *a: time.sleep(0.003), timeout=0.001)
        assert e.value.status == vc.Status.TIMED_OUT and isinstance(e.value, TimeoutError)
    with pytest.raises(vc.InvalidArgumentError):
        index.search(q, 5, timeout=-1)
    ctx = vc.Context("cpu", threads=2)
    assert ctx.timeout is None
    ctx.timeout = 0.25
    assert ctx.timeout == pytest.approx(0.25)
    ctx.timeout = None
    assert ctx.timeout is None


def test_loads_and_verifies_report_and_cancel(index, tmp_path):
    path = tmp_path / "ix.vlcc"
    index.save(path)
    seen = []
    vc.Index.load(path, progress=lambda *a: seen.append(a))
    assert seen and all(p == "verify" for p, _, _ in seen)
    with pytest.raises(vc.CancelledError):
        vc.Index.load(path, progress=lambda *a: True)
    deferred = vc.Index.load(path, verify=False)
    seen.clear()
    deferred.verify(progress=lambda *a: seen.append(a))
    assert seen and seen[-1][1] == seen[-1][2]
    with pytest.raises(vc.CancelledError):
        deferred.verify(progress=lambda *a: True)


def test_ctrl_c_stops_a_long_search():
    """SIGINT during a search on the main thread stops it with KeyboardInterrupt within
    about 50 ms (signals reach Python there only), and the index still answers."""
    import os
    import signal

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are delivered to the main thread")
    x = np.random.default_rng(3).standard_normal((60_000, 32)).astype(np.float32)
    c = vc.Compressor(vc.Context("cpu", threads=2), anchors=64, bytes_per_vector=8, max_iters=3)
    c.train(x[:10_000])
    ix = c.new_index()
    ix.add(x)
    q = x[:10_000]  # about a second's search on two cores
    sent = {}

    def interrupt():
        sent["at"] = time.perf_counter()
        os.kill(os.getpid(), signal.SIGINT)

    # A process started in the background by a shell without job control inherits SIGINT
    # ignored, and Python then installs no handler: the test sets Python's own.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.2, interrupt)
    timer.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt):
            ix.search(q, 10, nprobe=64)
        ended = time.perf_counter()
        timer.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert "at" in sent and ended - t0 >= 0.15, "the search ended before the signal"
    assert ended - sent["at"] < 0.1, ended - sent["at"]
    assert ix.search(q[:5], 10, nprobe=4)[1].shape == (5, 10)


def test_last_run_report_says_where_a_search_ran(index, data):
    x, _ = data
    index.search(x[:10], 5)
    assert vc.last_run_report() == {"backend": "cpu", "fallbacks": []}
    index.range_search(x[:10], 1e30, progress=lambda *a: None)
    assert vc.last_run_report() == {"backend": "cpu", "fallbacks": []}
    with pytest.raises(vc.InvalidArgumentError):
        index.search(x[:10, :3], 5)
    assert vc.last_run_report() is None
