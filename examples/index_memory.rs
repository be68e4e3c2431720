//! What an index costs in memory before and after its first search: makes an empty index on
//! a codebook file, then adds vectors, then searches once, printing the index's memory by part
//! and the process's resident memory at each step.
//!
//!     cargo run --release --example index_memory -- CODEBOOK.vlcc VECTORS.fvecs

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
    let ids: Vec<u64> = (0..x.rows as u64).collect();
    ix.add(&x.data[..], &ids)?;
    show("filled", &ix);
    ix.search(&x.data[..x.cols], &SearchParams::default(), None)?;
    show("searched once", &ix);
    ix.contains(0)?;
    show("id map built", &ix);
    Ok(())
}
