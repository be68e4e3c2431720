"""Shared helpers for the dataset builders in this folder.

* out_root()/work_dir(): where datasets go (--out, $VLC_DATA, default
  ~/.cache/vlc-datasets) and where the builders keep their virtual environment
  and downloads ($VLC_DATA_WORK, default ~/.cache/vlc-datasets-work).
* bootstrap(): makes sure the pinned Python packages are installed; if not,
  creates the virtual environment, pip-installs them and re-executes the
  calling script inside it.
* fetch_deb(): downloads a Debian package with `apt-get download` and unpacks
  it with `dpkg-deb -x`, so nothing is installed system-wide.
* write_fvecs()/write_ivecs()/read_fvecs()/read_ivecs(): the classic TEXMEX
  formats (little-endian: int32 dimension, then d float32 / int32 values).
* exact_knn(): exact top-k by squared L2 or by inner product, computed in
  float64, ties broken by the smaller base id.
* split_key()/select(): the stable hash that decides whether an item belongs
  to the dataset and orders it; the first n_query items are the queries.
* up_to_date()/write_dataset()/finish(): skip a finished build, write a new
  one so that an interrupted run is never taken for a finished one.

Everything is deterministic: no randomness is used anywhere; which items are
in the dataset, and which of them are queries, depends only on each item's
own content.
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = ("base.fvecs", "base.txt", "gt_ip.ivecs", "gt_l2.ivecs", "query.fvecs", "query.txt")
REFERENCE_SUMS = os.path.join(HERE, "reference.sha256")


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


# ---------------------------------------------------------------- locations
def _home_cache(name):
    return os.path.join(os.path.expanduser("~"), ".cache", name)


def out_root(arg=None):
    return os.path.abspath(arg or os.environ.get("VLC_DATA") or _home_cache("vlc-datasets"))


def work_dir():
    return os.path.abspath(os.environ.get("VLC_DATA_WORK") or _home_cache("vlc-datasets-work"))


def parse_args(doc, n_base_default, extra=None):
    """Common command line: --out, --n-query, --n-base, --force."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output root (default $VLC_DATA, else ~/.cache/vlc-datasets)")
    ap.add_argument("--n-query", type=int, default=1000)
    ap.add_argument("--n-base", type=int, default=n_base_default,
                    help="base vectors to store (default %(default)s; 0 = every item left)")
    ap.add_argument("--force", action="store_true", help="rebuild even if up to date")
    if extra:
        extra(ap)
    args = ap.parse_args()
    args.out = out_root(args.out)
    return args


# ---------------------------------------------------------------- environment
def _pins_missing(pins):
    """Names of the pinned distributions this interpreter lacks or has in
    another version."""
    from importlib.metadata import PackageNotFoundError, version
    bad = []
    for dist, want in pins.items():
        try:
            if version(dist) != want:
                bad.append(dist)
        except PackageNotFoundError:
            bad.append(dist)
    return bad


def bootstrap(pins):
    """pins: {distribution: version}. Return if this interpreter has exactly
    these versions; otherwise run the calling script again inside the work
    folder's virtual environment, creating it and pip-installing the pins
    first where needed."""
    missing = _pins_missing(pins)
    if not missing:
        return
    venv = os.path.join(work_dir(), "venv")
    py = os.path.join(venv, "bin", "python")
    if sys.version_info < (3, 11):
        raise SystemExit("Python 3.11 or newer is needed (the pinned numpy and torch need it); "
                         "run this with python3.11 or later (make_all.sh: PYTHON=python3.11)")
    if os.environ.get("VLC_DATA_BOOTSTRAPPED") == "1":
        raise SystemExit("still missing after installing into %s: %s" % (venv, missing))
    fresh = not os.path.exists(py)
    if fresh:
        log("creating virtual environment", venv)
        os.makedirs(os.path.dirname(venv), exist_ok=True)
        if subprocess.call([sys.executable, "-m", "venv", venv]) != 0:
            shutil.rmtree(venv, ignore_errors=True)
            raise SystemExit("python3 -m venv failed: install your system's venv module "
                             "(on Debian/Ubuntu: apt-get install python3-venv) and retry")
    check = ("import sys; sys.path.insert(0, %r); import common; "
             "print(' '.join(common._pins_missing(%r)))" % (HERE, pins))
    r = subprocess.run([py, "-c", check], capture_output=True, text=True)
    if fresh or r.returncode != 0 or r.stdout.split():
        reqs = ["%s==%s" % kv for kv in pins.items()]
        log("pip install", " ".join(reqs))
        if fresh:
            subprocess.check_call([py, "-m", "pip", "install", "-q", "--upgrade", "pip"])
        subprocess.check_call([py, "-m", "pip", "install", "-q"] + reqs)
    env = dict(os.environ, VLC_DATA_BOOTSTRAPPED="1")
    os.execve(py, [py] + sys.argv, env)


def fetch_deb(package, version=None):
    """Download a Debian package and unpack it under <work>/deb-<package>/root.

    Returns (root_dir, version_string). Tries the pinned version first, then
    whatever version the archive offers (the version used is returned and
    recorded by the caller)."""
    workdir = os.path.join(work_dir(), "deb-" + package)
    root = os.path.join(workdir, "root")
    stamp = os.path.join(workdir, "version.txt")
    if os.path.exists(stamp) and os.path.isdir(root):
        return root, open(stamp).read().strip()
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        raise SystemExit("%s comes from a Debian package: this needs apt-get and dpkg-deb "
                         "(Debian or Ubuntu)" % package)
    os.makedirs(workdir, exist_ok=True)
    for f in os.listdir(workdir):
        if f.endswith(".deb"):
            os.remove(os.path.join(workdir, f))

    def try_download(spec):
        return subprocess.call(["apt-get", "download", "-q", spec], cwd=workdir) == 0

    specs = ([package + "=" + version] if version else []) + [package]
    ok = any(try_download(s) for s in specs)
    if not ok:
        if os.geteuid() != 0:
            raise SystemExit("apt-get download %s failed: run `sudo apt-get update` and retry" % package)
        log("apt-get download failed; running apt-get update")
        subprocess.check_call(["apt-get", "update", "-q"])
        ok = any(try_download(s) for s in specs)
    if not ok:
        raise SystemExit("could not download Debian package %s" % package)
    debs = [f for f in os.listdir(workdir) if f.endswith(".deb")]
    assert len(debs) == 1, debs
    deb = os.path.join(workdir, debs[0])
    ver = subprocess.check_output(["dpkg-deb", "-f", deb, "Version"], text=True).strip()
    if version and ver != version:
        log("WARNING: wanted %s=%s, got %s" % (package, version, ver))
    shutil.rmtree(root, ignore_errors=True)
    subprocess.check_call(["dpkg-deb", "-x", deb, root])
    with open(stamp, "w") as fh:
        fh.write(ver + "\n")
    return root, ver


def pip_version(dist):
    from importlib.metadata import version
    return version(dist)


# --------------------------------------------------------------------- formats
def write_fvecs(path, X):
    import numpy as np
    X = np.ascontiguousarray(X, dtype="<f4")
    n, d = X.shape
    out = np.empty((n, d + 1), dtype="<f4")
    out[:, 1:] = X
    out.view("<i4")[:, 0] = d
    out.tofile(path)


def write_ivecs(path, I):
    import numpy as np
    I = np.ascontiguousarray(I, dtype="<i4")
    n, k = I.shape
    out = np.empty((n, k + 1), dtype="<i4")
    out[:, 1:] = I
    out[:, 0] = k
    out.tofile(path)


def _read_vecs(path, dtype):
    import numpy as np
    raw = np.fromfile(path, dtype="<i4")
    if raw.size == 0:
        return np.zeros((0, 0), dtype=dtype)
    d = int(raw[0])
    raw = raw.reshape(-1, d + 1)
    assert (raw[:, 0] == d).all(), "inconsistent dimensions in %s" % path
    return raw[:, 1:].copy().view(dtype)


def read_fvecs(path):
    return _read_vecs(path, "<f4")


def read_ivecs(path):
    return _read_vecs(path, "<i4")


# -------------------------------------------------------------- ground truth
def exact_knn(base, queries, k, metric, block=None):
    """Exact k nearest base ids for each query.

    metric 'l2': ascending squared Euclidean distance; 'ip': descending inner
    product. Computed in float64 from the float32 values; ties broken by the
    smaller id. Returns int32 array (nq, k)."""
    import numpy as np
    B = np.asarray(base, dtype=np.float64)
    Q = np.asarray(queries, dtype=np.float64)
    n = B.shape[0]
    assert n >= k
    if block is None:
        block = max(1, min(1024, int(1e8 // max(n, 1))))  # ~0.8 GB of float64 scores
    bn = (B * B).sum(1) if metric == "l2" else None
    out = np.empty((Q.shape[0], k), dtype=np.int32)
    for s in range(0, Q.shape[0], block):
        q = Q[s:s + block]
        S = q @ B.T
        if metric == "l2":
            D = bn[None, :] - 2.0 * S + (q * q).sum(1)[:, None]
        elif metric == "ip":
            D = -S
        else:
            raise ValueError(metric)
        part = np.argpartition(D, k - 1, axis=1)
        for r in range(D.shape[0]):
            row = D[r]
            thr = row[part[r, k - 1]]
            cand = np.nonzero(row <= thr)[0]          # includes every tie at the boundary
            order = np.lexsort((cand, row[cand]))    # by distance, then by id
            out[s + r] = cand[order[:k]]
    return out


# ------------------------------------------------------------------ selection
def split_key(namespace, item_bytes):
    """32-byte sha256 of namespace + NUL + item. An item belongs to the
    dataset when the low bit of byte 0 is 0; the whole digest orders the
    items of the dataset."""
    return hashlib.sha256(namespace.encode() + b"\x00" + item_bytes).digest()


def select(keys, n_query, n_base):
    """keys: one digest per distinct item. Returns (query_idx, base_idx,
    unused): indices into `keys` of the dataset's items, ordered by digest;
    the first n_query are the queries, the next n_base (None = all the rest)
    the base; `unused` counts the dataset's items left over by the cap. Items
    outside the dataset are skipped here and never looked at again."""
    idx = [i for i, key in enumerate(keys) if key[0] & 1 == 0]
    idx.sort(key=lambda i: keys[i])
    q = idx[:n_query]
    rest = idx[n_query:]
    b = rest if n_base is None else rest[:n_base]
    if len(q) < n_query or (n_base is not None and len(b) < n_base) or not b:
        raise SystemExit("the dataset has only %d items" % len(idx))
    return q, b, len(rest) - len(b)


# ---------------------------------------------------------------- writing out
def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_sums(path):
    """{relative path: digest} from a sha256sum-style file ({} if absent)."""
    sums = {}
    if os.path.exists(path):
        for line in open(path):
            if line.strip():
                digest, rel = line.split()
                sums[rel] = digest
    return sums


def up_to_date(ds_dir, build):
    """True when a finished build made with the same `build` settings is in
    ds_dir and every file still matches its SHA256SUMS (written last)."""
    try:
        with open(os.path.join(ds_dir, "info.json")) as fh:
            if json.load(fh).get("build") != build:
                return False
    except (OSError, ValueError):
        return False
    sums = read_sums(os.path.join(ds_dir, "SHA256SUMS"))
    if set(sums) != {"dev/" + f for f in FILES}:
        return False
    return all(os.path.exists(os.path.join(ds_dir, rel)) and
               sha256_file(os.path.join(ds_dir, rel)) == d for rel, d in sums.items())


def compare_reference(ds_dir, name):
    """Compare dev/ files with reference.sha256 (the digests of the team's
    build). Returns {file: True/False}."""
    ref = read_sums(REFERENCE_SUMS)
    cur = read_sums(os.path.join(ds_dir, "SHA256SUMS"))
    res = {}
    for f in FILES:
        rel = "dev/" + f
        res[f] = ref.get(name + "/" + rel) is not None and cur.get(rel) == ref.get(name + "/" + rel)
    return res


def report_reference(ds_dir, name, build, defaults):
    if build != defaults:
        log("non-default settings: no reference digests to compare with")
        return
    res = compare_reference(ds_dir, name)
    if all(res.values()):
        log("%s: all %d files identical to the reference build" % (name, len(res)))
    else:
        log("%s: differs from the reference build in %s (see datasets/README.md, "
            "Reproducibility)" % (name, ", ".join(f for f, ok in res.items() if not ok)))


def write_part(out_dir, base, queries, k=100, base_labels=None, query_labels=None):
    """Write base/query fvecs, exact ground truth and the label files."""
    import numpy as np
    os.makedirs(out_dir, exist_ok=True)
    t = time.time()
    write_fvecs(os.path.join(out_dir, "base.fvecs"), base)
    write_fvecs(os.path.join(out_dir, "query.fvecs"), queries)
    # Ground truth is computed from the float32 values actually stored.
    base32 = read_fvecs(os.path.join(out_dir, "base.fvecs"))
    q32 = read_fvecs(os.path.join(out_dir, "query.fvecs"))
    for metric in ("l2", "ip"):
        gt = exact_knn(base32, q32, k, metric)
        write_ivecs(os.path.join(out_dir, "gt_%s.ivecs" % metric), gt)
    for name, labels in (("base.txt", base_labels), ("query.txt", query_labels)):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as fh:
            for s in labels:
                assert "\n" not in s
                fh.write(s + "\n")
    log("wrote base", base.shape, "query", queries.shape, "gt in %.1fs" % (time.time() - t))
    return {"n_base": int(base.shape[0]), "n_query": int(queries.shape[0]),
            "dim": int(base.shape[1]), "k": k,
            "base_norm_mean": float(np.linalg.norm(base32, axis=1).mean())}


def write_dataset(ds_dir, base, queries, base_labels, query_labels):
    """Write the files into ds_dir/dev.partial, then put them in place as
    ds_dir/dev. The old SHA256SUMS is removed before dev/ changes, so that
    until finish() runs nothing there passes for a finished build."""
    tmp = os.path.join(ds_dir, "dev.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    meta = write_part(tmp, base, queries, base_labels=base_labels, query_labels=query_labels)
    sums = os.path.join(ds_dir, "SHA256SUMS")
    if os.path.exists(sums):
        os.remove(sums)
    dev = os.path.join(ds_dir, "dev")
    shutil.rmtree(dev, ignore_errors=True)
    os.rename(tmp, dev)
    return meta


def finish(ds_dir, info, readme):
    """info.json, README.md, then SHA256SUMS (the mark of a finished build)."""
    with open(os.path.join(ds_dir, "info.json"), "w") as fh:
        json.dump(info, fh, indent=2, sort_keys=True)
        fh.write("\n")
    with open(os.path.join(ds_dir, "README.md"), "w") as fh:
        fh.write(readme)
    lines = ["%s  dev/%s" % (sha256_file(os.path.join(ds_dir, "dev", f)), f) for f in FILES]
    tmp = os.path.join(ds_dir, "SHA256SUMS.partial")
    with open(tmp, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    os.replace(tmp, os.path.join(ds_dir, "SHA256SUMS"))


FORMAT_NOTES = """\
- `dev/base.fvecs`, `dev/query.fvecs`: for each vector, int32 d then d
  float32, little-endian.
- `dev/gt_l2.ivecs`, `dev/gt_ip.ivecs`: for each query, int32 k = 100 then
  the ids (0-based rows of base.fvecs) of its 100 exact nearest base vectors,
  nearest first: ascending squared L2 / descending inner product, computed in
  float64 from the stored float32 values, ties to the smaller id.
- `dev/base.txt`, `dev/query.txt`: one line per vector, same order: {labels}.
- `info.json`: the numbers, package versions and build settings;
  `SHA256SUMS`: the digests of the six files (`sha256sum -c SHA256SUMS`)."""
