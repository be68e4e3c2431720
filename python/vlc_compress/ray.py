"""Scale out on Ray: train a codebook once, encode and build index shards across a cluster,
search the shards where they are loaded and merge the top k. `pip install ./python[ray]`.

    import vlc_compress.ray as vr
    cb = vr.train_codebook(ds, sample=200_000, params={"anchors": 4096, "bytes_per_vector": 32})
    codes = vr.encode(ds, cb)                       # a Dataset of id and code columns
    vr.build_shards(ds, cb, "/shared/ix", n_shards=16)
    D, I = vr.search("/shared/ix", queries, k=10, nprobe=32)

Datasets hold one vector per row in `column` (default "vector") and its id in `id_column`
(default "id"). The codebook travels through the object store once, never per batch. Shards are
index files in one directory with a manifest naming them, their counts and the codebook's
fingerprint; a shard of another codebook is refused."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any, Callable, Optional

import numpy as np
import ray

import vlc_compress as vc
from vlc_compress.errors import of

MANIFEST = "manifest.json"
CODEBOOK = "codebook.vlcc"


@dataclasses.dataclass(frozen=True)
class Codebook:
    """A trained codebook: its bytes (the codebook file's) and fingerprint."""

    data: bytes
    fingerprint: int

    @staticmethod
    def of(c: vc.Compressor) -> "Codebook":
        return Codebook(c.codebook_bytes(), c.fingerprint)

    def compressor(self, context: Optional[vc.Context] = None) -> vc.Compressor:
        return vc.Compressor.from_codebook(self.data, context)


def _rows(batch: dict, column: str) -> np.ndarray:
    x = batch[column]
    if x.dtype == object:  # ragged storage of equal rows
        x = np.stack(list(x))
    if x.ndim != 2:
        raise of("INVALID_ARGUMENT", f"column {column!r} must hold one vector per row; got shape {x.shape}")
    return x


def _sample(ds: "ray.data.Dataset", sample: int, column: str, seed: int) -> np.ndarray:
    n = ds.count()
    part = ds if sample >= n else ds.random_sample(min(1.0, 1.2 * sample / n), seed=seed)
    rows = [_rows(b, column) for b in part.iter_batches(batch_format="numpy", batch_size=65536)]
    return np.concatenate(rows)[:sample]


def _train(x: np.ndarray, params: dict, backend: str) -> bytes:
    c = vc.Compressor(vc.Context(backend), **params)
    c.train(x)
    return c.codebook_bytes()


def train_codebook(
    ds: "ray.data.Dataset",
    *,
    sample: int = 100_000,
    params: Optional[dict] = None,
    column: str = "vector",
    seed: int = 0,
    num_gpus: float = 0,
) -> Codebook:
    """Trains on a sample of about `sample` rows of `ds`: on the driver, or with `num_gpus`
    on one worker with a GPU (CUDA)."""
    x = _sample(ds, sample, column, seed)
    params = dict(params or {})
    if num_gpus:
        task = ray.remote(num_gpus=num_gpus)(_train)
        data = ray.get(task.remote(x, params, "cuda"))
    else:
        data = _train(x, params, "cpu")
    return Codebook(data, vc.Compressor.from_codebook(data).fingerprint)


class _Encoder:
    """Opens the codebook once per actor (from the object store), then encodes batches."""

    def __init__(self, codebook: list, column: str, id_column: str, threads: int, before_batch: Optional[Callable]):
        self.c = vc.Compressor.from_codebook(ray.get(codebook[0]), vc.Context("cpu", threads=threads))
        self.column, self.id_column, self.before_batch = column, id_column, before_batch

    def __call__(self, batch: dict) -> dict:
        if self.before_batch is not None:
            self.before_batch(batch)
        return {"id": batch[self.id_column], "code": self.c.encode(_rows(batch, self.column))}


# Actors are restarted and their batches retried when a worker dies.
_RETRY = {"max_restarts": -1, "max_task_retries": -1}


def encode(
    ds: "ray.data.Dataset",
    codebook: Codebook,
    *,
    column: str = "vector",
    id_column: str = "id",
    concurrency: int = 2,
    num_cpus: float = 0.5,
    threads: int = 1,
    batch_size: int = 16384,
    before_batch: Optional[Callable[[dict], Any]] = None,
) -> "ray.data.Dataset":
    """A Dataset of `id` and `code` (uint8, code_size per row): `ds` encoded by `concurrency`
    actors of `num_cpus` CPUs and `threads` library threads each. `before_batch(batch)` runs in
    the worker before each batch (instrumentation; a batch whose worker dies is retried)."""
    ref = ray.put(codebook.data)
    return ds.map_batches(
        _Encoder,
        fn_constructor_kwargs=dict(codebook=[ref], column=column, id_column=id_column, threads=threads, before_batch=before_batch),
        batch_size=batch_size,
        batch_format="numpy",
        concurrency=concurrency,
        num_cpus=num_cpus,
        ray_remote_args_fn=lambda: dict(_RETRY),
    )


class _ShardWriter:
    """Writes one shard per group: an index of the group's rows, saved atomically."""

    def __init__(self, codebook: list, path: str, column: str, id_column: str, refine: Optional[str], threads: int):
        self.c = vc.Compressor.from_codebook(ray.get(codebook[0]), vc.Context("cpu", threads=threads))
        self.path, self.column, self.id_column, self.refine = pathlib.Path(path), column, id_column, refine

    def __call__(self, group: dict) -> dict:
        shard = int(group["_shard"][0])
        ix = self.c.new_index(refine=self.refine)
        ix.add(_rows(group, self.column), ids=group[self.id_column])
        name = f"shard-{shard:05d}.vlcc"
        ix.save(self.path / name)
        return {"file": np.array([name]), "vectors": np.array([len(ix)]), "fingerprint": np.array([ix.fingerprint], dtype=np.uint64)}


def _write_json(path: pathlib.Path, value: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value, indent=1))
    os.replace(tmp, path)


def build_shards(
    ds: "ray.data.Dataset",
    codebook: Codebook,
    path: "str | os.PathLike[str]",
    n_shards: int,
    *,
    column: str = "vector",
    id_column: str = "id",
    refine: Optional[str] = None,
    concurrency: int = 2,
    num_cpus: float = 0.5,
    threads: int = 1,
) -> dict:
    """Writes `n_shards` index files (rows go to shard `id % n_shards`) into the directory
    `path`, with the codebook and a manifest; returns the manifest. `refine` keeps side rows
    (error bounds, or f16/int8 vectors for a re-rank without the caller's vectors)."""
    if n_shards < 1:
        raise of("INVALID_ARGUMENT", f"n_shards = {n_shards}: at least 1")
    root = pathlib.Path(path)
    root.mkdir(parents=True, exist_ok=True)
    old = root / MANIFEST
    held = json.loads(old.read_text())["fingerprint"] if old.exists() else codebook.fingerprint
    if held != codebook.fingerprint:
        raise of("CODEBOOK_MISMATCH", f"{root} holds shards of codebook {held:#x}, not {codebook.fingerprint:#x}")
    (root / CODEBOOK).write_bytes(codebook.data)
    ref = ray.put(codebook.data)
    keyed = ds.map_batches(lambda b: {**b, "_shard": b[id_column] % n_shards}, batch_format="numpy")
    out = keyed.groupby("_shard").map_groups(
        _ShardWriter,
        fn_constructor_kwargs=dict(codebook=[ref], path=str(root), column=column, id_column=id_column, refine=refine, threads=threads),
        batch_format="numpy",
        concurrency=concurrency,
        num_cpus=num_cpus,
        ray_remote_args_fn=lambda: dict(_RETRY),
    )
    shards = sorted(out.take_all(), key=lambda r: r["file"])
    manifest = {
        "format": "vlc_compress shards",
        "version": 1,
        "fingerprint": codebook.fingerprint,
        "codebook": CODEBOOK,
        "vectors": int(sum(int(s["vectors"]) for s in shards)),
        "shards": [{"file": str(s["file"]), "vectors": int(s["vectors"])} for s in shards],
    }
    _write_json(old, manifest)
    return manifest


def read_manifest(path: "str | os.PathLike[str]") -> dict:
    m = json.loads((pathlib.Path(path) / MANIFEST).read_text())
    if m.get("format") != "vlc_compress shards" or m.get("version") != 1:
        raise of("CORRUPT", f"{path}: not a shard manifest of version 1")
    return m


def _load_shard(file: pathlib.Path, fingerprint: int, context: vc.Context, verify: bool = True) -> vc.Index:
    ix = vc.Index.load(file, mmap=True, verify=verify, context=context)
    if ix.fingerprint != fingerprint:
        raise of("CODEBOOK_MISMATCH", f"{file.name} was built on codebook {ix.fingerprint:#x}; the manifest's is {fingerprint:#x}")
    return ix


@ray.remote
class _ShardActor:
    """One shard, memory-mapped where the actor runs, searched there."""

    def __init__(self, file: str, fingerprint: int, threads: int):
        self.ix = _load_shard(pathlib.Path(file), fingerprint, vc.Context("cpu", threads=threads))

    def search(self, q: np.ndarray, k: int, nprobe: int, rerank: int, raw: Optional[list], auto: bool):
        raw_rows = ray.get(raw[0]) if raw else None
        if auto:
            D, I, _, _, cert = self.ix.search_bounded(q, k, nprobe=nprobe, rerank=rerank, raw=raw_rows, auto=True)
            return D, I, cert
        D, I = self.ix.search(q, k, nprobe=nprobe, rerank=rerank, raw=raw_rows)
        return D, I, None


def merge_topk(parts: list, k: int, larger_is_better: bool) -> tuple[np.ndarray, np.ndarray]:
    """The global top k of per-shard results [(D, I), ...] (missing: id -1, NaN), best first,
    ties by id."""
    D = np.concatenate([p[0] for p in parts], axis=1)
    I = np.concatenate([p[1] for p in parts], axis=1)
    key = np.where(I < 0, np.inf, -D if larger_is_better else D)
    order = np.lexsort((np.where(I < 0, np.iinfo(np.int64).max, I), key), axis=1)[:, :k]
    return np.take_along_axis(D, order, 1), np.take_along_axis(I, order, 1)


class ShardedIndex:
    """The shards of a directory, each loaded (memory-mapped) by an actor; `search` fans the
    queries out and merges the top k on the driver. `close()` (or a `with` block) ends the
    actors."""

    def __init__(self, path: "str | os.PathLike[str]", *, num_cpus: float = 0.5, threads: int = 1):
        self.path = pathlib.Path(path)
        self.manifest = read_manifest(self.path)
        self.metric = vc.Compressor.from_codebook((self.path / self.manifest["codebook"]).read_bytes()).params["metric"]
        fp = self.manifest["fingerprint"]
        # A refused shard fails here, on the driver, with the library's own error (mapping
        # reads the header and tables of contents, not the codes).
        for s in self.manifest["shards"]:
            _load_shard(self.path / s["file"], fp, vc.Context("cpu", threads=1), verify=False)
        self.actors = [
            _ShardActor.options(num_cpus=num_cpus).remote(str(self.path / s["file"]), fp, threads)
            for s in self.manifest["shards"]
        ]
        # Surface a refused shard here rather than at the first search.
        ray.get([a.__ray_ready__.remote() for a in self.actors])

    def search(self, queries: np.ndarray, k: int, nprobe: int = 16, rerank: int = 0, raw: Optional[np.ndarray] = None, auto: bool = False):
        """`(D, I)` as `Index.search` gives them over all shards; with `auto` (a certified
        re-rank against `raw`), `(D, I, certified)`: the merged top k is exact over the probed
        lists where every shard certified its own."""
        q = ray.put(np.ascontiguousarray(queries, dtype=np.float32))
        raw_ref = [ray.put(np.ascontiguousarray(raw, dtype=np.float32))] if raw is not None else None
        parts = ray.get([a.search.remote(q, k, nprobe, rerank, raw_ref, auto) for a in self.actors])
        D, I = merge_topk(parts, k, larger_is_better=self.metric != 0)
        if auto:
            return D, I, np.logical_and.reduce([p[2] for p in parts])
        return D, I

    def close(self) -> None:
        for a in self.actors:
            ray.kill(a)
        self.actors = []

    def __enter__(self) -> "ShardedIndex":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def search(path: "str | os.PathLike[str]", queries: np.ndarray, k: int, **kw: Any):
    """One fan-out search over the shards in `path` (see ShardedIndex.search)."""
    opts = {o: kw.pop(o) for o in ("num_cpus", "threads") if o in kw}
    with ShardedIndex(path, **opts) as ix:
        return ix.search(queries, k, **kw)


def merge_shards(path: "str | os.PathLike[str]", context: Optional[vc.Context] = None) -> vc.Index:
    """Every shard of `path` merged into one index in memory (for sets that fit one machine)."""
    root = pathlib.Path(path)
    m = read_manifest(root)
    cb = vc.Compressor.from_codebook((root / m["codebook"]).read_bytes(), context)
    if cb.fingerprint != m["fingerprint"]:
        raise of("CODEBOOK_MISMATCH", f"{m['codebook']} is codebook {cb.fingerprint:#x}; the manifest's is {m['fingerprint']:#x}")
    ctx = context or vc.Context("cpu")
    shards = [_load_shard(root / s["file"], m["fingerprint"], ctx) for s in m["shards"]]
    out = cb.new_index(refine=shards[0].refine if shards else None)
    for shard in shards:
        out.merge(shard)
    return out
