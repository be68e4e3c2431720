#!/usr/bin/env python3
"""fashion-mnist-784: Fashion-MNIST images (Debian package
dataset-fashion-mnist) as 784-d float32 vectors of raw pixel values 0..255,
the form ann-benchmarks uses for fashion-mnist-784-euclidean. Writes
<out>/fashion-mnist-784/{dev/, README.md, info.json, SHA256SUMS}.

Usage:  python3 make_fashion_mnist.py [--out DIR] [--n-base 24000] [--force]

Installs what it needs (numpy in a virtual environment under $VLC_DATA_WORK,
default ~/.cache/vlc-datasets-work; the Debian package is fetched with
`apt-get download` and unpacked there, not installed). Does nothing if a
finished build with the same settings is there and matches its SHA256SUMS.
Deterministic: which images are in the dataset, and which are queries, comes
from a sha256 of each image's bytes; no random numbers are used.
"""
import gzip
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

PINS = {"numpy": "2.4.6"}
DEB = ("dataset-fashion-mnist", "0.0~git20200523.55506a9-1")
NAME = "fashion-mnist-784"
NAMESPACE = "fashion-mnist-v1"
DEFAULTS = {"n_query": 1000, "n_base": 24000}
CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
           "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


def read_idx(path):
    import numpy as np
    with gzip.open(path, "rb") as fh:
        data = fh.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    assert zero == 0 and dtype_code == 0x08, "not an unsigned-byte IDX file"
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    return arr.reshape(dims)


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

    t_start = time.time()
    root, deb_ver = common.fetch_deb(*DEB)
    d = os.path.join(root, "usr", "share", "datasets", "fashion-mnist")
    imgs, labels, src = [], [], []
    for split, prefix in (("train", "train"), ("t10k", "t10k")):
        X = read_idx(os.path.join(d, prefix + "-images-idx3-ubyte.gz"))
        y = read_idx(os.path.join(d, prefix + "-labels-idx1-ubyte.gz"))
        assert X.shape[0] == y.shape[0] and X.shape[1:] == (28, 28)
        imgs.append(X.reshape(X.shape[0], 784))
        labels.append(y)
        src += ["%s:%d" % (split, i) for i in range(X.shape[0])]
    X = np.concatenate(imgs)
    y = np.concatenate(labels)
    n_total = X.shape[0]
    # Remove exact duplicate images (first occurrence kept).
    seen, keep = set(), []
    for i in range(n_total):
        b = X[i].tobytes()
        if b not in seen:
            seen.add(b)
            keep.append(i)
    common.log("%s %s: %d images, %d distinct" % (DEB[0], deb_ver, n_total, len(keep)))
    keys = [common.split_key(NAMESPACE, X[i].tobytes()) for i in keep]
    qi, bi, spare = common.select(keys, args.n_query, args.n_base or None)
    qidx = [keep[i] for i in qi]
    bidx = [keep[i] for i in bi]

    def lab(j):
        return "%s label=%d %s" % (src[j], int(y[j]), CLASSES[int(y[j])])

    meta = common.write_dataset(ds, X[bidx].astype(np.float32), X[qidx].astype(np.float32),
                                base_labels=[lab(j) for j in bidx],
                                query_labels=[lab(j) for j in qidx])
    info = dict(meta, name=NAME, family="image pixels (raw grey levels 0..255)", normalized=False,
                unused_images=spare, build=build, threads=os.cpu_count(),
                source={"debian": {DEB[0]: deb_ver}, "pypi": {"numpy": common.pip_version("numpy")}},
                total_seconds=round(time.time() - t_start, 1))
    common.finish(ds, info, readme(info, args))
    common.log("%s: done in %.1fs, in %s" % (NAME, time.time() - t_start, ds))
    common.report_reference(ds, NAME, build, DEFAULTS)


def readme(info, args):
    opts = "" if info["build"] == DEFAULTS else " --n-base %d --n-query %d" % (args.n_base, args.n_query)
    return f"""# {NAME}

Real image vectors: Fashion-MNIST images (Zalando's 28x28 grey-level article
photos), each flattened to 784 float32 values equal to the raw pixel grey
levels 0..255 (not normalised), the form ann-benchmarks uses for
fashion-mnist-784-euclidean.

| | |
| --- | --- |
| base vectors | {info['n_base']} |
| query vectors | {info['n_query']} |
| dimension | 784, float32 (integral values 0..255) |
| ground truth | top-100 by squared L2 (`gt_l2`) and by inner product (`gt_ip`) |
| images of the dataset left out by the size cap | {info['unused_images']} |

Mean base vector norm: {info['base_norm_mean']:.1f}. L2 is this dataset's
usual metric; inner product on raw pixels is given for completeness.

## Files

{common.FORMAT_NOTES.format(labels="source file and index, class label")}

## Source

Debian package `{DEB[0]}` version {info['source']['debian'][DEB[0]]} (files
train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz,
t10k-labels-idx1-ubyte.gz: 60,000 train + 10,000 test images). License as the
package states it (debian/copyright): Expat (MIT), Copyright 2017 Zalando SE;
Debian packaging Expat, 2019-2020 Mo Zhou.

## Selection

All images, exact duplicates removed (first kept). About half of them make up
this dataset: an image is in it when the low bit of the first byte of
sha256("{NAMESPACE}" + NUL + the 784 pixel bytes) is 0. The other images are the
part of the data this project measures on; these scripts never write them.
The dataset's images are ordered by that digest: the first {info['n_query']} are the
queries, the {'rest' if not args.n_base else 'next %d' % args.n_base} the base. Queries and base share no image.

## Rebuild

From the project root (the script makes its own virtual environment with
numpy if needed and `apt-get download`s the Debian package, unpacking it
without installing it), this dataset alone:

    python3 datasets/make_fashion_mnist.py{opts}

or all three datasets with `datasets/make_all.sh`.

The base is capped at 24,000 vectors by default (about 80 MB for the
dataset); `--n-base 0` stores every image of the dataset (about 34,000 base
vectors, about 112 MB). This build took {info['total_seconds']} s on a machine with {info['threads']} CPU threads.
"""


if __name__ == "__main__":
    main()
