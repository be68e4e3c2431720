//! `vlcc`: train, encode, decode, build, search and evaluate from the command line.

mod bench;
mod eval;
mod interrupt;
mod opts;

use clap::{Args, Parser, Subcommand};
use opts::*;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vlc_compress::{format, vecio, Compressor, Context, DenseRaw, SearchParams};

#[derive(Parser)]
#[command(
    name = "vlcc",
    version,
    about = "Compact codes for float embeddings: train, encode, search, evaluate"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs on a small real dataset shipped with the library and prints what it achieves.
    Demo(DemoArgs),
    /// Trains a codebook on vectors and saves it.
    Train(TrainArgs),
    /// Encodes vectors with a codebook (codec mode) into a .npy of bytes.
    Encode(EncodeArgs),
    /// Decodes codes back to approximate vectors.
    Decode(DecodeArgs),
    /// Builds an index (training a codebook unless one is given); ids are row numbers.
    Build(BuildArgs),
    /// Searches an index.
    Search(SearchArgs),
    /// Trains, builds and measures recall and speed against ground truth.
    Eval(eval::EvalArgs),
    /// Times anchor training, encoding and search at given sizes.
    Bench(bench::BenchArgs),
    /// Describes an index file: sizes, balance and memory by part; checks its checksums.
    Info(InfoArgs),
    /// Prints the memory training, building an index and searching it take at their peak for
    /// n vectors of d dimensions with the given parameters (what --memory-cap is checked
    /// against).
    Estimate(EstimateArgs),
}

#[derive(Args)]
struct DemoArgs {
    #[command(flatten)]
    run: RunOpts,
}

#[derive(Args)]
struct TrainArgs {
    /// Training vectors (.fvecs or .npy, f32 or f16).
    #[arg(long)]
    input: PathBuf,
    /// Codebook file to write.
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    train: TrainOpts,
    #[command(flatten)]
    run: RunOpts,
}

#[derive(Args)]
struct EncodeArgs {
    #[arg(long)]
    codebook: PathBuf,
    #[arg(long)]
    input: PathBuf,
    /// Output .npy (uint8, n x code bytes).
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    run: RunOpts,
}

#[derive(Args)]
struct DecodeArgs {
    #[arg(long)]
    codebook: PathBuf,
    /// Codes written by `vlcc encode`.
    #[arg(long)]
    input: PathBuf,
    /// Output .fvecs or .npy.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args)]
struct BuildArgs {
    /// Vectors to index (ids are their row numbers).
    #[arg(long)]
    input: PathBuf,
    /// Index file to write.
    #[arg(long)]
    out: PathBuf,
    /// Use this codebook instead of training one on the input.
    #[arg(long)]
    codebook: Option<PathBuf>,
    /// Keep refinement vectors in the index (none, f16 or int8): `search --rerank` then needs
    /// no --raw.
    #[arg(long, default_value = "none")]
    refine: vlc_compress::Refine,
    #[command(flatten)]
    train: TrainOpts,
    #[command(flatten)]
    run: RunOpts,
}

#[derive(Args)]
struct InfoArgs {
    /// The index file.
    index: PathBuf,
    /// Map the file checking only its structure and codebook (fast on large files), not
    /// every checksum; with --verify, check them afterwards.
    #[arg(long)]
    defer_checksums: bool,
    /// Check every section checksum (after a --defer-checksums load).
    #[arg(long)]
    verify: bool,
}

#[derive(Args)]
struct EstimateArgs {
    /// Vectors: trained on, added, or held by the index searched.
    #[arg(long)]
    n: usize,
    /// Dimensions.
    #[arg(long)]
    d: usize,
    #[command(flatten)]
    train: TrainOpts,
    #[command(flatten)]
    run: RunOpts,
}

#[derive(Args)]
struct SearchArgs {
    #[arg(long)]
    index: PathBuf,
    #[arg(long)]
    query: PathBuf,
    #[arg(long, default_value_t = 10)]
    k: usize,
    #[arg(long, default_value_t = 16)]
    nprobe: usize,
    /// Re-rank this many candidates exactly (against --raw, or the index's refinement
    /// vectors), or `auto`: the certified re-rank (up to --rerank-cap candidates; needs --raw
    /// and an index built with --refine other than none).
    #[arg(long, default_value = "0")]
    rerank: eval::RerankArg,
    /// Most candidates an `auto` re-rank keeps per query.
    #[arg(long, default_value_t = 1000)]
    rerank_cap: usize,
    /// Raw vectors of the index (row number = id), for --rerank.
    #[arg(long)]
    raw: Option<PathBuf>,
    /// Output: .ivecs (ids, -1 = none; ids must fit int32) or .npy (int64 ids).
    #[arg(long)]
    out: PathBuf,
    /// Also the distances, k per query: .fvecs or .npy (float32): squared L2, or the
    /// similarity for ip and cosine; NaN where no result.
    #[arg(long)]
    out_distances: Option<PathBuf>,
    /// Return only allowed ids: a .txt file of ids (one per line, decimal, any order) or a
    /// .bin bitset (bit i % 8 of byte i / 8 allows id i; 8 x its size bits).
    #[arg(long)]
    filter: Option<PathBuf>,
    /// Range search: every hit within this squared L2 distance (or with at least this
    /// similarity, for ip and cosine) instead of the k best. --out must then be .ivecs and
    /// --out-distances .fvecs: one row per query, as long as its hits. Negative values are
    /// taken as values (a similarity, say): `--radius -5`.
    #[arg(long, allow_negative_numbers = true)]
    radius: Option<f32>,
    #[command(flatten)]
    run: RunOpts,
}

/// Result ids as .ivecs holds them: -1 for none; an id beyond int32 is refused.
fn ivecs_ids(ids: &[u64], out: &std::path::Path) -> Result<Vec<i32>, String> {
    ids.iter()
        .map(|&i| match i32::try_from(i) {
            Ok(v) => Ok(v),
            Err(_) if i == u64::MAX => Ok(-1),
            Err(_) => Err(format!(
                "--out {}: id {i} does not fit .ivecs (int32); write .npy (int64)",
                out.display()
            )),
        })
        .collect()
}

/// The filter a --filter file describes (see `SearchArgs::filter`).
fn read_filter(path: &std::path::Path) -> Result<vlc_compress::Filter, Box<dyn std::error::Error>> {
    let what = |e: &dyn std::fmt::Display| format!("--filter {}: {e}", path.display());
    let bytes = vecio::read_file(path).map_err(|e| what(&e))?;
    match path.extension().and_then(|e| e.to_str()) {
        Some("txt") => {
            let text = std::str::from_utf8(&bytes).map_err(|e| what(&e))?;
            let mut ids = Vec::new();
            for (n, line) in text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
            {
                let id = line.trim().parse::<u64>().map_err(|e| {
                    what(&format!(
                        "line {}: {:?} is not an id ({e})",
                        n + 1,
                        line.trim()
                    ))
                })?;
                ids.push(id);
            }
            ids.sort_unstable();
            ids.dedup();
            Ok(vlc_compress::Filter::ids(&ids)?)
        }
        Some("bin") => Ok(vlc_compress::Filter::bitset(
            &bytes,
            bytes.len() as u64 * 8,
        )?),
        _ => Err(what(&"must end in .txt (ids) or .bin (bitset)").into()),
    }
}

fn main() {
    let cli = Cli::parse();
    interrupt::install();
    let res = match cli.cmd {
        Cmd::Demo(a) => eval::demo(&a.run),
        Cmd::Train(a) => train(a),
        Cmd::Encode(a) => encode(a),
        Cmd::Decode(a) => decode(a),
        Cmd::Build(a) => build(a),
        Cmd::Search(a) => search(a),
        Cmd::Eval(a) => eval::eval(&a),
        Cmd::Bench(a) => bench::bench(&a),
        Cmd::Info(a) => info(a),
        Cmd::Estimate(a) => estimate(a),
    };
    if let Err(e) = res {
        if interrupted_call(&*e) {
            eprintln!("vlcc: interrupted");
            std::process::exit(130);
        }
        eprintln!("vlcc: {e}");
        std::process::exit(1);
    }
}

/// Where the last call on this thread ran, and what of it fell back to the host.
fn ran_on() -> (&'static str, Vec<&'static str>) {
    vlc_compress::last_run_report().map_or(("unknown", Vec::new()), |r| {
        (r.backend.name(), r.fallbacks.names())
    })
}

/// Whether `e` is a call that Ctrl-C cancelled.
fn interrupted_call(e: &(dyn std::error::Error + 'static)) -> bool {
    interrupt::interrupted()
        && matches!(
            e.downcast_ref::<vlc_compress::Error>(),
            Some(vlc_compress::Error::Cancelled(_))
        )
}

pub(crate) type AnyResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Refuses an output path whose extension is not one of `kinds`, before any work is done.
fn output_kind(out: &Path, kinds: &[&str]) -> AnyResult {
    flag_output_kind("--out", out, kinds)
}

fn flag_output_kind(flag: &str, out: &Path, kinds: &[&str]) -> AnyResult {
    match out.extension().and_then(|e| e.to_str()) {
        Some(e) if kinds.contains(&e) => Ok(()),
        _ => Err(format!(
            "{flag} {}: must end in .{}",
            out.display(),
            kinds.join(" or .")
        )
        .into()),
    }
}

/// Refuses a file of no vectors where training needs some.
fn some_rows(flag: &str, path: &Path, rows: usize) -> AnyResult {
    if rows == 0 {
        return Err(format!(
            "{flag} {}: no vectors, and training needs at least one",
            path.display()
        )
        .into());
    }
    Ok(())
}

/// Refuses vectors of another dimension than what they are used with, naming both. A file of
/// no vectors (`rows` 0: an empty .fvecs cannot say its dimension) agrees with any.
pub(crate) fn same_dim(
    flag: &str,
    path: &Path,
    (rows, got): (usize, usize),
    what: &str,
    want: usize,
) -> AnyResult {
    if rows > 0 && got != want {
        return Err(format!(
            "{flag} {}: vectors have d = {got}, {what} has d = {want}",
            path.display()
        )
        .into());
    }
    Ok(())
}

fn train(a: TrainArgs) -> AnyResult {
    let x = vecio::read_vectors(&a.input)?;
    some_rows("--input", &a.input, x.rows)?;
    let ctx = a.run.context()?;
    let bar = eval::Bar::on(&ctx, a.run.json);
    let mut c = Compressor::new(ctx, a.train.params());
    let rep = c.train(&x.data, x.cols)?.clone();
    let (memory, _) = c.estimate_training_memory(x.rows, x.cols)?;
    bar.finish();
    let cb = c.codebook()?;
    format::save_codebook(cb, &a.out)?;
    let out = serde_json::json!({
        "n": x.rows, "d": x.cols, "anchors": cb.anchors(), "bytes_per_vector": cb.residual_code_size(),
        "codec_bytes": cb.codec_size(), "fingerprint": format!("{:016x}", cb.fingerprint()),
        "energy": rep.energy, "max_list_over_mean": rep.max_list_over_mean, "iterations": rep.iterations,
        "train_seconds": rep.anchor_seconds + rep.pq_seconds, "anchor_seconds": rep.anchor_seconds,
        "pq_seconds": rep.pq_seconds, "pq_mse": rep.pq_mse, "out": a.out.display().to_string(),
        "estimated_memory_bytes": memory,
    });
    eval::print_object(&out, a.run.json);
    Ok(())
}

fn estimate(a: EstimateArgs) -> AnyResult<()> {
    let c = Compressor::new(a.run.context()?, a.train.params());
    let mut out = serde_json::Map::new();
    for w in ["train", "build", "search"] {
        let (host, device) = c.estimate_memory(w.parse()?, a.n, a.d)?;
        out.insert(format!("{w}_host_bytes"), host.into());
        out.insert(format!("{w}_device_bytes"), device.into());
    }
    eval::print_object(&serde_json::Value::Object(out), a.run.json);
    Ok(())
}

fn load_compressor(path: &Path, ctx: Arc<Context>) -> AnyResult<Compressor> {
    Ok(Compressor::with_codebook(
        ctx,
        Arc::new(format::load_codebook(path)?),
    ))
}

fn encode(a: EncodeArgs) -> AnyResult {
    output_kind(&a.out, &["npy"])?;
    let ctx = a.run.context()?;
    let bar = eval::Bar::on(&ctx, a.run.json);
    let c = load_compressor(&a.codebook, ctx)?;
    let d = c.codebook()?.dim();
    let input = vecio::read_floats(&a.input)?;
    let shape = match &input {
        vecio::Floats::F32(m) => (m.rows, m.cols),
        vecio::Floats::F16(m) => (m.rows, m.cols),
    };
    same_dim("--input", &a.input, shape, "the codebook", d)?;
    let t = std::time::Instant::now();
    let (rows, codes) = match input {
        vecio::Floats::F32(m) => (m.rows, c.encode(m.data[..].into())?),
        vecio::Floats::F16(m) => (m.rows, c.encode(m.data[..].into())?),
    };
    let secs = t.elapsed().as_secs_f64();
    bar.finish();
    let cb = c.codebook()?;
    let cs = cb.codec_size();
    vecio::write_npy(&a.out, &codes, rows, cs, "|u1")?;
    // `bytes_per_vector` is the residual code everywhere (as the parameter); a record adds
    // the anchor id.
    let out = serde_json::json!({"n": rows, "bytes_per_vector": cb.residual_code_size(),
        "codec_bytes": cs, "encode_seconds": secs, "out": a.out.display().to_string()});
    eval::print_object(&out, a.run.json);
    Ok(())
}

fn decode(a: DecodeArgs) -> AnyResult {
    output_kind(&a.out, &["fvecs", "npy"])?;
    let cb = format::load_codebook(&a.codebook)?;
    let codes = match vecio::read_npy(&a.input)? {
        vecio::NpyData::U8(m) => m,
        _ => return Err("codes must be a uint8 .npy written by `vlcc encode`".into()),
    };
    if codes.cols != cb.codec_size() {
        return Err(format!(
            "codes have {} bytes per vector, the codebook expects {}",
            codes.cols,
            cb.codec_size()
        )
        .into());
    }
    let x = cb.decode(&codes.data)?;
    vecio::write_vectors(&a.out, &x, cb.dim())?;
    Ok(())
}

fn build(a: BuildArgs) -> AnyResult {
    let x = vecio::read_vectors(&a.input)?;
    let ctx = a.run.context()?;
    let bar = eval::Bar::on(&ctx, a.run.json);
    let c = match &a.codebook {
        Some(p) => {
            let c = load_compressor(p, ctx.clone())?;
            let d = c.codebook()?.dim();
            same_dim("--input", &a.input, (x.rows, x.cols), "the codebook", d)?;
            c
        }
        None => {
            some_rows("--input", &a.input, x.rows)?;
            let mut c = Compressor::new(ctx.clone(), a.train.params());
            c.train(&x.data, x.cols)?;
            c
        }
    };
    let mut index = c.new_index_with_refine(a.refine)?;
    let ids: Vec<u64> = (0..x.rows as u64).collect();
    index.add(&x.data[..], &ids)?;
    bar.finish();
    index.save(&a.out)?;
    eval::print_object(&serde_json::to_value(index.stats())?, a.run.json);
    Ok(())
}

fn info(a: InfoArgs) -> AnyResult {
    let ctx = Arc::new(Context::new(vlc_compress::BackendKind::Cpu, 0, 1)?);
    interrupt::watch(&ctx);
    let t = std::time::Instant::now();
    let index = if a.defer_checksums {
        vlc_compress::Index::load_deferred(ctx, &a.index)?
    } else {
        vlc_compress::Index::load(ctx, &a.index, true)?
    };
    let load_seconds = t.elapsed().as_secs_f64();
    let mut out = serde_json::to_value(index.stats())?;
    out["load_seconds"] = load_seconds.into();
    if a.verify {
        let t = std::time::Instant::now();
        index.verify()?;
        out["verify_seconds"] = t.elapsed().as_secs_f64().into();
    }
    out["checksums"] = if a.verify || !a.defer_checksums {
        "verified"
    } else {
        "deferred"
    }
    .into();
    eval::print_object(&out, true);
    Ok(())
}

fn search(a: SearchArgs) -> AnyResult {
    let ragged = a.radius.is_some();
    output_kind(
        &a.out,
        if ragged {
            &["ivecs"]
        } else {
            &["ivecs", "npy"]
        },
    )?;
    if let Some(p) = &a.out_distances {
        let kinds: &[&str] = if ragged {
            &["fvecs"]
        } else {
            &["fvecs", "npy"]
        };
        flag_output_kind("--out-distances", p, kinds)?;
    }
    let filter = a.filter.as_deref().map(read_filter).transpose()?;
    let ctx = a.run.context()?;
    let index = vlc_compress::Index::load(ctx, &a.index, true)?;
    let d = index.codebook().dim();
    let q = vecio::read_vectors(&a.query)?;
    same_dim("--query", &a.query, (q.rows, q.cols), "the index", d)?;
    let raw = a.raw.as_deref().map(vecio::read_vectors).transpose()?;
    if let (Some(r), Some(path)) = (&raw, &a.raw) {
        same_dim("--raw", path, (r.rows, r.cols), "the index", d)?;
    }
    let dense = raw.as_ref().map(|r| DenseRaw {
        data: &r.data,
        d: r.cols,
    });
    let (depth, auto) = match a.rerank {
        eval::RerankArg::Depth(n) => (n, false),
        eval::RerankArg::Auto => (a.rerank_cap, true),
    };
    let p = SearchParams {
        k: a.k,
        nprobe: a.nprobe,
        rerank: depth,
    };
    let raw = dense.as_ref().map(|r| r as &dyn vlc_compress::RawVectors);
    if let Some(radius) = a.radius {
        let t = std::time::Instant::now();
        let res = index.range_search(&q.data, radius, &p, raw, filter.as_ref())?;
        let secs = t.elapsed().as_secs_f64();
        let ran = ran_on();
        vecio::write_ragged(&a.out, &ivecs_ids(&res.ids, &a.out)?, &res.offsets)?;
        if let Some(p) = &a.out_distances {
            vecio::write_ragged(p, &res.distances, &res.offsets)?;
        }
        let out = serde_json::json!({"queries": q.rows, "radius": radius, "nprobe": a.nprobe, "rerank": depth, "seconds": secs, "qps": q.rows as f64 / secs, "hits": res.ids.len(), "mean_hits": res.ids.len() as f64 / q.rows.max(1) as f64, "ran_on": ran.0, "fallbacks": ran.1});
        eval::print_object(&out, a.run.json);
        return Ok(());
    }
    let t = std::time::Instant::now();
    let (res, reranked) = if auto {
        let b = index.search_bounded(&q.data, &p, raw, filter.as_ref(), true)?;
        let mean = b.reranked.iter().sum::<usize>() as f64 / q.rows.max(1) as f64;
        let certified = b.certified.iter().filter(|&&c| c).count();
        (b.results, Some((mean, certified)))
    } else {
        (
            index.search_filtered(&q.data, &p, raw, filter.as_ref())?,
            None,
        )
    };
    let secs = t.elapsed().as_secs_f64();
    let ran = ran_on();
    match a.out.extension().and_then(|e| e.to_str()) {
        Some("ivecs") => vecio::write_ivecs(&a.out, &ivecs_ids(&res.ids, &a.out)?, a.k)?,
        Some("npy") => {
            let ids: Vec<i64> = res
                .ids
                .iter()
                .map(|&i| i64::try_from(i).unwrap_or(-1))
                .collect();
            vecio::write_npy(&a.out, &ids, q.rows, a.k, "<i8")?
        }
        _ => unreachable!("checked by output_kind"),
    }
    if let Some(p) = &a.out_distances {
        vecio::write_vectors(p, &res.distances, a.k)?;
    }
    let short = (0..q.rows).filter(|&i| res.found(i) < a.k).count();
    let mut out = serde_json::json!({"queries": q.rows, "k": a.k, "nprobe": a.nprobe, "rerank": depth, "seconds": secs, "qps": q.rows as f64 / secs, "queries_short_of_k": short, "ran_on": ran.0, "fallbacks": ran.1});
    if let Some((mean, certified)) = reranked {
        out["rerank"] = "auto".into();
        out["reranked_per_query"] = mean.into();
        out["queries_certified"] = certified.into();
    }
    eval::print_object(&out, a.run.json);
    Ok(())
}
