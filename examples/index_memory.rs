//! What an index costs in memory before and after its first search: makes an empty index on
//! a codebook file, then adds the vectors COPIES times (10 by default), then searches once,
//! printing the index's memory by part and the process's resident memory at each step; then
//! saves it, loads it memory-mapped and changes it once, printing the process's anonymous
//! (heap) memory, which a mapped file's pages do not count in.
//!
//!     cargo run --release --example index_memory -- CODEBOOK.vlcc VECTORS.fvecs [COPIES]

use std::sync::Arc;
use vlc_compress::{format, vecio, BackendKind, Context, Index, SearchParams};

/// Resident set size in MiB (Linux), else 0.
fn rss_mib() -> f64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / (1 << 20) as f64
}

/// Resident anonymous memory in MiB (Linux), else 0: the heap, without mapped files' pages.
fn anon_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let cb = Arc::new(format::load_codebook(std::path::Path::new(&args[1]))?);
    let x = vecio::read_vectors(std::path::Path::new(&args[2]))?;
    let ctx = Arc::new(Context::new(BackendKind::Cpu, 0, 2)?);
    let show = |what: &str, ix: &Index| {
        let s = ix.stats();
        println!(
            "{what:>14}: rss {:>7.1} MiB | codes {:>6.1} MiB, ids {:>5.1}, id map {:>5.1}, tables {:>6.1}, fast-scan {:>5.1}",
            rss_mib(),
            s.code_bytes as f64 / (1 << 20) as f64,
            s.id_bytes as f64 / (1 << 20) as f64,
            s.id_map_bytes as f64 / (1 << 20) as f64,
            s.table_bytes as f64 / (1 << 20) as f64,
            s.fast_scan_bytes as f64 / (1 << 20) as f64,
        );
    };
    println!(
        "{} lists, {} B codes, {}-d; {} vectors",
        cb.anchors(),
        cb.residual_code_size(),
        cb.dim(),
        x.rows
    );
    println!("{:>14}: rss {:>7.1} MiB", "before", rss_mib());
    let mut ix = Index::new(ctx, cb)?;
    show("empty", &ix);
    let copies: u64 = args.get(3).map_or(Ok(10), |c| c.parse())?;
    for c in 0..copies {
        let ids: Vec<u64> = (0..x.rows as u64).map(|i| c * x.rows as u64 + i).collect();
        ix.add(&x.data[..], &ids)?;
    }
    show("filled", &ix);
    ix.search(&x.data[..x.cols], &SearchParams::default(), None)?;
    show("searched once", &ix);
    ix.contains(0)?;
    show("id map built", &ix);

    let path = std::env::temp_dir().join(format!("index_memory_{}.vlcc", std::process::id()));
    ix.save(&path)?;
    drop(ix);
    let ctx = Arc::new(Context::new(BackendKind::Cpu, 0, 2)?);
    let heap = |what: &str, ix: &Index| {
        let s = ix.stats();
        println!(
            "{what:>14}: heap {:>7.1} MiB | lists in memory {} of {}",
            anon_mib(),
            s.lists_in_memory,
            s.lists
        );
    };
    let mut m = Index::load(ctx, &path, true)?;
    heap("mapped", &m);
    m.add(&x.data[..x.cols], &[u64::MAX - 1])?;
    heap("added 1", &m);
    m.remove(&[1])?;
    heap("removed 1", &m);
    std::fs::remove_file(&path)?;
    Ok(())
}
