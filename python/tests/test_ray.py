"""The Ray adapter on a local cluster started here (fractional CPUs: whole-CPU actors
deadlock on two cores)."""

import json
import os
import pathlib

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import vlc_compress as vc  # noqa: E402
import vlc_compress.ray as vr  # noqa: E402
from conftest import clustered  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def vectors():
    x = clustered(8000, 24, 30, 5)
    return x, clustered(40, 24, 30, 6)


@pytest.fixture(scope="module")
def dataset(cluster, vectors):
    x, _ = vectors
    return ray.data.from_items([{"id": i, "vector": x[i]} for i in range(len(x))], override_num_blocks=8)


@pytest.fixture(scope="module")
def codebook(dataset):
    return vr.train_codebook(dataset, sample=6000, params={"anchors": 32, "bytes_per_vector": 8, "seed": 3})


def test_train_on_a_sample(codebook, vectors):
    c = codebook.compressor()
    assert c.fingerprint == codebook.fingerprint and c.d == vectors[0].shape[1]


def by_id(ds):
    rows = ds.take_all()
    order = np.argsort([r["id"] for r in rows])
    return np.array([rows[i]["id"] for i in order]), np.stack([rows[i]["code"] for i in order])


def test_encode_matches_one_process(dataset, codebook, vectors):
    x, _ = vectors
    ids, codes = by_id(vr.encode(dataset, codebook, batch_size=1000))
    assert (ids == np.arange(len(x))).all()
    assert (codes == codebook.compressor().encode(x)).all()


def test_a_killed_worker_is_retried_and_exact(dataset, codebook, vectors, tmp_path):
    x, _ = vectors
    marker = str(tmp_path / "killed")

    def die_once(batch):
        # The first worker to reach a batch holding id 3000 dies there, once.
        if 3000 in batch["id"] and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)

    ids, codes = by_id(vr.encode(dataset, codebook, batch_size=500, before_batch=die_once))
    assert os.path.exists(marker), "no worker was killed"
    assert (ids == np.arange(len(x))).all()
    assert (codes == codebook.compressor().encode(x)).all()


@pytest.fixture(scope="module")
def shards(dataset, codebook, tmp_path_factory):
    path = tmp_path_factory.mktemp("shards")
    vr.build_shards(dataset, codebook, path, n_shards=4, refine="bound")
    return path


def test_shards_match_one_index(shards, codebook, vectors):
    x, q = vectors
    m = vr.read_manifest(shards)
    assert len(m["shards"]) == 4 and m["vectors"] == len(x) and m["fingerprint"] == codebook.fingerprint
    one = codebook.compressor().new_index(refine="bound")
    one.add(x)
    want_D, want_I = one.search(q, 10, nprobe=8)
    with vr.ShardedIndex(shards) as six:
        D, I = six.search(q, 10, nprobe=8)
        # Exactly the ids and distances of one index (ties in distance ordered by id).
        w = vr.merge_topk([(want_D, want_I)], 10, larger_is_better=False)
        assert (I == w[1]).all() and (D == w[0]).all()
        # A certified re-rank: the merged top k is exact over the probed lists.
        D, I, cert = six.search(q, 10, nprobe=8, rerank=300, raw=x, auto=True)
        # The exact top k over the probed lists: every candidate there re-scored.
        eD, eI = one.search(q, 10, nprobe=8, rerank=len(x), raw=x)
        assert cert.mean() > 0.5, cert.mean()
        assert (I[cert] == eI[cert]).all() and np.allclose(D[cert], eD[cert], rtol=1e-5)
    merged = vr.merge_shards(shards)
    assert len(merged) == len(x)
    mD, mI = merged.search(q, 10, nprobe=8)
    assert (np.sort(mI, 1) == np.sort(want_I, 1)).all()
    D2, I2 = vr.search(shards, q, 10, nprobe=8)
    assert (I2 == w[1]).all()


def test_a_shard_of_another_codebook_is_refused(shards, dataset, vectors, tmp_path):
    x, _ = vectors
    other = vr.train_codebook(dataset, sample=3000, params={"anchors": 16, "bytes_per_vector": 8, "seed": 9})
    with pytest.raises(vc.CodebookMismatchError):
        vr.build_shards(dataset, other, shards, n_shards=2)
    # A foreign shard file in a copy of the directory.
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in pathlib.Path(shards).iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    foreign = other.compressor().new_index()
    foreign.add(x[:100])
    foreign.save(copy / json.loads((copy / vr.MANIFEST).read_text())["shards"][1]["file"])
    with pytest.raises(vc.CodebookMismatchError, match="shard-00001"):
        vr.merge_shards(copy)
    with pytest.raises(vc.CodebookMismatchError, match="shard-00001"):
        vr.ShardedIndex(copy)
