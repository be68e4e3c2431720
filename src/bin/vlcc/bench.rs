//! `vlcc bench`: times anchor training, encoding and search at given sizes, on synthetic or
//! file data. Each stage is timed `--repeat` times and the best run is reported.

use super::{AnnealOpts, AnyResult, RunOpts};
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;
use vlc_compress::{
    synth, train, vecio, AnchorParams, Compressor, DenseRaw, NoProgress, RawVectors, SearchParams,
    TrainParams,
};

#[derive(Args)]
pub(crate) struct BenchArgs {
    /// Vectors to use instead of synthetic data (.fvecs or .npy).
    #[arg(long)]
    base: Option<PathBuf>,
    /// Synthetic vectors: count.
    #[arg(long, default_value_t = 10_000)]
    n: usize,
    /// Synthetic vectors: dimension.
    #[arg(long, default_value_t = 128)]
    d: usize,
    /// Synthetic vectors: 0 = independent Gaussian, else this many Gaussian clusters.
    #[arg(long, default_value_t = 0)]
    clusters: usize,
    #[arg(long, default_value_t = 256)]
    anchors: usize,
    /// Anchor iterations (the loop runs all of them: no early stop).
    #[arg(long, default_value_t = 30)]
    iters: usize,
    /// Code bytes per vector for the encode and search stages.
    #[arg(long, default_value_t = 16)]
    bytes: usize,
    /// Bits per sub-code for the encode and search stages (8 or 4).
    #[arg(long, default_value_t = 8)]
    bits: u32,
    /// Queries for the search stage (taken from the data, the first rows).
    #[arg(long, default_value_t = 1000)]
    queries: usize,
    #[arg(long, default_value_t = 16)]
    nprobe: usize,
    /// Stages to run: train, encode, search, add (the first search after adding one vector,
    /// then 1% of them, against a warm search before and on an index built whole).
    #[arg(long, value_delimiter = ',', default_value = "train,encode,search")]
    stages: Vec<String>,
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Search stage: re-rank this many candidates exactly against the vectors (0 = off).
    #[arg(long, default_value_t = 0)]
    rerank: usize,
    /// Read the vectors from CUDA device memory (uploaded once, untimed), as a caller whose
    /// embeddings are already on the GPU does (`--backend cuda`): the encode stage encodes
    /// them there, and the search stage's re-rank reads them there.
    #[arg(long)]
    from_device: bool,
    /// Training seed (anchors and codebooks).
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Error level in each code's last byte: auto, on or off (as `train --error-code`)
    #[arg(long, default_value = "auto")]
    error_code: vlc_compress::ErrorCode,
    #[command(flatten)]
    anneal: AnnealOpts,
    #[command(flatten)]
    run: RunOpts,
}

fn best<T>(repeat: usize, mut f: impl FnMut() -> AnyResult<T>) -> AnyResult<(f64, T)> {
    let mut out = None;
    let mut best = f64::INFINITY;
    for _ in 0..repeat.max(1) {
        let t = Instant::now();
        let v = f()?;
        let s = t.elapsed().as_secs_f64();
        if s < best {
            best = s;
        }
        out = Some(v);
    }
    Ok((best, out.expect("at least one run")))
}

/// The median of `v` (not empty).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The add stage: an index of all but the last 1% (and `repeat` more) of `x`, searched warm
/// (`queries` queries, median of `repeat` runs); then one vector added before each of
/// `repeat` searches (the first after it), then the rest of the 1% added and searched once;
/// against the warm search of an index built whole from the same vectors.
fn add_stage(a: &BenchArgs, c: &Compressor, x: &[f32], d: usize) -> AnyResult<serde_json::Value> {
    let n = x.len() / d;
    let reps = a.repeat.max(1);
    let tail = (n / 100).max(1);
    if n < tail + reps + 1 {
        return Err(format!("the add stage needs more than {} vectors", tail + reps).into());
    }
    let n0 = n - tail - reps;
    let nq = a.queries.min(n).max(1);
    let q = &x[..nq * d];
    let p = SearchParams {
        k: 10,
        nprobe: a.nprobe,
        rerank: 0,
    };
    let timed = |ix: &vlc_compress::Index| -> AnyResult<f64> {
        let t = Instant::now();
        ix.search(q, &p, None)?;
        Ok(t.elapsed().as_secs_f64())
    };
    let ids = |r: std::ops::Range<usize>| r.map(|i| i as u64).collect::<Vec<u64>>();
    let mut ix = c.new_index()?;
    ix.add(&x[..n0 * d], &ids(0..n0))?;
    timed(&ix)?;
    let warm = median((0..reps).map(|_| timed(&ix)).collect::<AnyResult<_>>()?);
    let mut after_one = Vec::new();
    for r in n0..n0 + reps {
        ix.add(&x[r * d..(r + 1) * d], &ids(r..r + 1))?;
        after_one.push(timed(&ix)?);
    }
    let after_one = median(after_one);
    let (from, t) = (n0 + reps, Instant::now());
    ix.add(&x[from * d..], &ids(from..n))?;
    let add_secs = t.elapsed().as_secs_f64();
    let after_tail = timed(&ix)?;
    let mut whole = c.new_index()?;
    whole.add(x, &ids(0..n))?;
    timed(&whole)?;
    let fresh = median((0..reps).map(|_| timed(&whole)).collect::<AnyResult<_>>()?);
    Ok(serde_json::json!({
        "stage": "add", "bytes": a.bytes, "bits": a.bits, "queries": nq, "nprobe": a.nprobe,
        "warm_seconds": warm, "after_one_seconds": after_one,
        "after_one_over_warm": after_one / warm,
        "added": n - from, "add_seconds": add_secs, "adds_per_second": (n - from) as f64 / add_secs,
        "after_one_percent_seconds": after_tail, "fresh_warm_seconds": fresh,
        "after_one_percent_over_fresh": after_tail / fresh,
        "seconds": after_one, "qps": nq as f64 / after_one,
    }))
}

pub(crate) fn bench(a: &BenchArgs) -> AnyResult {
    let (x, d) = match &a.base {
        Some(p) => {
            let m = vecio::read_vectors(p)?;
            (m.data, m.cols)
        }
        None if a.clusters > 0 => (synth::clustered(a.n, a.d, a.clusters, 1), a.d),
        None => (synth::gaussian(a.n, a.d, 1), a.d),
    };
    let n = x.len() / d.max(1);
    let ctx = a.run.context()?;
    let has = |s: &str| a.stages.iter().any(|v| v == s);
    let mut rows = Vec::new();
    let base = serde_json::json!({"backend": ctx.backend().kind().name(), "threads": ctx.threads(), "n": n, "d": d, "anchors": a.anchors});
    let with = |extra: serde_json::Value| {
        let mut o = base.clone();
        o.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        o
    };
    if has("train") {
        let mut p = AnchorParams {
            anchors: a.anchors,
            max_iters: a.iters,
            tol: 0.0,
            seed: a.seed,
            ..AnchorParams::default()
        };
        a.anneal.apply(&mut p);
        let t0 = ctx.backend().transfers();
        let (secs, r) = best(a.repeat, || {
            Ok(ctx.run(|b| train::train_anchors(b, &x, d, &p, &NoProgress))?)
        })?;
        let t1 = ctx.backend().transfers();
        let runs = a.repeat.max(1) as u64;
        rows.push(with(serde_json::json!({
            "stage": "train", "iters": r.iterations, "seconds": secs, "energy": r.energy,
            "h2d_bytes": (t1.h2d_bytes - t0.h2d_bytes) / runs,
            "d2h_bytes": (t1.d2h_bytes - t0.d2h_bytes) / runs,
            "max_list_over_mean": r.max_over_mean(), "points_used": r.points,
            "empty_anchors": r.empty_anchors,
            "gflops": 2.0 * (r.points * a.anchors * d * (r.iterations + 1)) as f64 / secs / 1e9,
        })));
    }
    if has("encode") || has("search") || has("add") {
        let mut params = TrainParams {
            bytes_per_vector: a.bytes,
            bits: a.bits,
            error_code: a.error_code,
            ..TrainParams::default()
        };
        params.anchor.anchors = a.anchors;
        params.anchor.max_iters = a.iters;
        params.anchor.seed = a.seed;
        a.anneal.apply(&mut params.anchor);
        let mut c = Compressor::new(ctx.clone(), params);
        c.train(&x, d)?;
        let cb = c.codebook()?.clone();
        let xd = match a.from_device {
            true => Some(a.run.device_copy(&ctx, &x, "--from-device")?),
            false => None,
        };
        if has("encode") {
            let (secs, _) = if let Some(xd) = &xd {
                // SAFETY: nothing writes the device copy while it is encoded.
                best(a.repeat, || {
                    Ok(ctx.run(|b| unsafe { cb.encode_device(b, xd.at, n) })?)
                })?
            } else {
                best(a.repeat, || Ok(ctx.run(|b| cb.encode(b, x[..].into()))?))?
            };
            let input = if a.from_device { "device" } else { "host" };
            rows.push(with(serde_json::json!({"stage": "encode", "bytes": a.bytes, "bits": a.bits, "input": input, "seconds": secs, "vectors_per_second": n as f64 / secs})));
        }
        if has("search") {
            let mut index = c.new_index()?;
            let ids: Vec<u64> = (0..n as u64).collect();
            index.add(&x[..], &ids)?;
            let nq = a.queries.min(n);
            let p = SearchParams {
                k: 10,
                nprobe: a.nprobe,
                rerank: a.rerank,
            };
            let raw = DenseRaw { data: &x, d };
            let q = &x[..nq * d];
            let (secs, _) = best(a.repeat, || {
                Ok(match &xd {
                    // SAFETY: nothing writes the device copy while it is searched.
                    Some(xd) => unsafe { index.search_device_raw(q, &p, xd.at, n) },
                    None => index.search(q, &p, Some(&raw as &dyn RawVectors)),
                }?)
            })?;
            let raw_at = if xd.is_some() { "device" } else { "host" };
            rows.push(with(serde_json::json!({"stage": "search", "bytes": a.bytes, "bits": a.bits, "queries": nq, "nprobe": a.nprobe, "rerank": a.rerank, "raw": raw_at, "seconds": secs, "qps": nq as f64 / secs})));
        }
        if has("add") {
            rows.push(with(add_stage(a, &c, &x, d)?));
        }
    }
    if a.run.json {
        for r in &rows {
            println!("{r}");
        }
    } else {
        println!(
            "{:>8} {:>8} {:>6} {:>8} {:>10} {:>14}",
            "stage", "n", "d", "anchors", "seconds", "throughput"
        );
        for r in &rows {
            let tp = match r["stage"].as_str() {
                Some("train") => format!("{:.1} GFLOP/s", r["gflops"].as_f64().unwrap_or(0.0)),
                Some("encode") => format!(
                    "{:.0} vec/s",
                    r["vectors_per_second"].as_f64().unwrap_or(0.0)
                ),
                _ => format!("{:.0} QPS", r["qps"].as_f64().unwrap_or(0.0)),
            };
            println!(
                "{:>8} {:>8} {:>6} {:>8} {:>10.4} {:>14}",
                r["stage"].as_str().unwrap_or(""),
                n,
                d,
                a.anchors,
                r["seconds"].as_f64().unwrap_or(0.0),
                tp
            );
        }
    }
    Ok(())
}
