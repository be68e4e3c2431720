//! What a host sees of the memory cap, its allocator left as it is: each capped call (train,
//! encode, add, search, range search, merge) on two sizes grows the process's resident memory
//! by at most its cap and a tenth. Each call runs in a child process of its own (this test
//! run again with `VLCC_CAP_CASE` set), as a host's first call would: memory that earlier
//! calls left with the allocator would otherwise hide growth. Linux only (it reads and resets
//! /proc/self's counters).
mod common;

use std::sync::Arc;
use vlc_compress::{Compressor, Context, Error, Index, SearchParams};

const SIZES: [(usize, usize, usize, u32); 2] = [(50_000, 96, 24, 8), (200_000, 128, 32, 4)];
const CALLS: [&str; 8] = [
    "train at its estimate",
    "train at its least cap",
    "encode at its least cap",
    "add at its least cap",
    "first search at its estimate",
    "first search at its least cap",
    "range search with room for its hits",
    "merge at its least cap",
];

fn status_kib(field: &str) -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Runs `f` under `cap` on `ctx`; returns the growth of resident memory's high-water mark
/// while it ran, in bytes, with `f`'s result. Less the file pages it grew by: the first call
/// of a kind pages in the library's code (1.5 MiB for a training), which is shared, not
/// memory the call takes.
fn grown_under<R>(ctx: &Context, cap: usize, f: impl FnOnce() -> R) -> (usize, R) {
    ctx.set_memory_cap(cap);
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = status_kib("VmRSS:");
    let file = status_kib("RssFile:");
    let r = f();
    let code = status_kib("RssFile:").saturating_sub(file);
    let grew = status_kib("VmHWM:").saturating_sub(before + code) * 1024;
    ctx.set_memory_cap(0);
    (grew, r)
}

/// The bytes a refused call said it needs ("... needs about N bytes of memory ...").
fn needs(e: &Error) -> usize {
    let s = e.to_string();
    let after = s
        .split("needs about ")
        .nth(1)
        .unwrap_or_else(|| panic!("{s}"));
    after.split(' ').next().unwrap().parse().unwrap()
}

/// The least cap `f` runs under: from one byte, each refusal's figure in turn (a search
/// refused its tables is then refused the light ones). Refused calls are measured too, and
/// must not grow. Returns the cap and the growth of the run let through.
fn at_least_cap<R>(
    ctx: &Context,
    mut f: impl FnMut() -> vlc_compress::Result<R>,
) -> (usize, usize) {
    let mut cap = 1;
    for _ in 0..4 {
        match grown_under(ctx, cap, &mut f) {
            (grew, Ok(_)) => return (cap, grew),
            (grew, Err(e @ Error::OutOfMemory(_))) => {
                assert!(
                    grew < 1 << 20,
                    "a call refused at {cap} B grew {grew} B: {e}"
                );
                cap = needs(&e);
            }
            (_, Err(e)) => panic!("{e}"),
        }
    }
    panic!("refused at {cap} bytes");
}

/// Sets up `SIZES[size]` and runs `CALLS[call]` on it: (cap, growth).
fn run_case(size: usize, call: usize) -> (usize, usize) {
    let (n, d, bytes, bits) = SIZES[size];
    let x = common::clustered(n, d, 50, 11);
    let ids: Vec<u64> = (0..n as u64).collect();
    let ctx: Arc<Context> = common::ctx(2);
    let mut p = common::small_params(512, bytes);
    p.bits = bits;
    let train = &x[..n / 2 * d];
    let mut c = Compressor::new(ctx.clone(), p);
    match call {
        0 => {
            let cap = c.estimate_training_memory(n / 2, d).unwrap().0;
            let (grew, r) = grown_under(&ctx, cap, || c.train(train, d).map(|_| ()));
            r.unwrap();
            return (cap, grew);
        }
        1 => return at_least_cap(&ctx, || c.train(train, d).map(|_| ())),
        _ => c.train(train, d).unwrap(),
    };
    if call == 2 {
        return at_least_cap(&ctx, || c.encode((&x[..]).into()));
    }
    let mut ix = c.new_index().unwrap();
    if call == 3 {
        return at_least_cap(&ctx, || ix.add(&x[..], &ids));
    }
    ix.add(&x[..], &ids).unwrap();
    // k = 10, nprobe 16.
    let sp = SearchParams::default();
    let q = &x[..2000 * d];
    // Searches run on an index fresh from its bytes, so that the first builds what it needs.
    let file = ix.to_bytes();
    let fresh = || Index::from_bytes(ctx.clone(), &file).unwrap();
    match call {
        4 => {
            let ix = fresh();
            let cap = ix.estimate_search_memory(2000, &sp).unwrap().0;
            let (grew, r) = grown_under(&ctx, cap, || ix.search(q, &sp, None));
            r.unwrap();
            (cap, grew)
        }
        5 => {
            let ix = fresh();
            at_least_cap(&ctx, || ix.search(q, &sp, None))
        }
        6 => {
            // A radius of about 200 hits a query; room for the first search's estimate and
            // the hits (each query's grow by doubling: twice as many).
            let probe = ix
                .search(&q[..100 * d], &SearchParams { k: 200, ..sp }, None)
                .unwrap();
            let radius = probe.distances[199];
            let hits = ix
                .range_search(q, radius, &sp, None, None)
                .unwrap()
                .ids
                .len();
            let ix = fresh();
            let cap = ix.estimate_search_memory(2000, &sp).unwrap().0 + hits * 28 * 2;
            let (grew, r) = grown_under(&ctx, cap, || ix.range_search(q, radius, &sp, None, None));
            r.unwrap();
            (cap, grew)
        }
        _ => {
            let other = fresh();
            at_least_cap(&ctx, || ix.merge_from(&other))
        }
    }
}

#[cfg(target_os = "linux")]
#[test]
fn capped_calls_grow_resident_memory_within_their_caps() {
    if let Ok(case) = std::env::var("VLCC_CAP_CASE") {
        let (size, call) = case.split_once(',').unwrap();
        let (cap, grew) = run_case(size.parse().unwrap(), call.parse().unwrap());
        println!("CASE {cap} {grew}");
        return;
    }
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    let mut rows = Vec::new();
    for (size, &(n, d, _, bits)) in SIZES.iter().enumerate() {
        for (call, what) in CALLS.iter().enumerate() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "capped_calls_grow_resident_memory_within_their_caps",
                ])
                .args(["--nocapture", "--test-threads=1"])
                .env("VLCC_CAP_CASE", format!("{size},{call}"))
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text.lines().find_map(|l| l.split("CASE ").nth(1));
            let Some(line) = line else {
                panic!("{what}: {text}{}", String::from_utf8_lossy(&out.stderr));
            };
            let v: Vec<usize> = line.split(' ').map(|s| s.parse().unwrap()).collect();
            let ratio = v[1] as f64 / v[0] as f64;
            rows.push((
                ratio,
                format!(
                    "{n} x {d}, {bits}-bit, {what}: cap {:.1} MiB, grew {:.1} MiB ({ratio:.2})",
                    mib(v[0]),
                    mib(v[1])
                ),
            ));
        }
    }
    let all: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    eprintln!("{}", all.join("\n"));
    for (ratio, row) in &rows {
        assert!(*ratio <= 1.10, "{row}");
    }
}

/// The copies a call makes count against its cap: a search's filter (here a bitset over
/// 40M ids, 5 MB), the id map that `contains` builds, and `try_to_bytes`'s buffer.
#[test]
fn copies_of_caller_data_count_against_the_cap() {
    let (n, d) = (20_000, 32);
    let x = common::clustered(n, d, 20, 3);
    let ids: Vec<u64> = (0..n as u64).collect();
    let ctx = common::ctx(2);
    let mut c = Compressor::new(ctx.clone(), common::small_params(64, 8));
    c.train(&x, d).unwrap();
    let mut ix = c.new_index().unwrap();
    ix.add(&x[..], &ids).unwrap();
    let sp = SearchParams {
        nprobe: 4,
        ..SearchParams::default()
    };
    let q = &x[..10 * d];
    let bits = vec![0xffu8; 5_000_000];
    let filter = vlc_compress::index::Filter::bitset(&bits, 40_000_000).unwrap();
    // Room for the search and its tables, not for the filter beside them.
    let plain = ix.estimate_search_memory(10, &sp).unwrap().0;
    ix.search(q, &sp, None).unwrap();
    ctx.set_memory_cap(plain + 1_000_000);
    ix.search(q, &sp, None).unwrap();
    let r = ix.search_filtered(q, &sp, None, Some(&filter));
    assert!(matches!(r, Err(Error::OutOfMemory(_))), "{r:?}");
    ctx.set_memory_cap(plain + 6_000_000);
    ix.search_filtered(q, &sp, None, Some(&filter)).unwrap();

    let file = ix.to_bytes();
    ctx.set_memory_cap(file.len() / 2);
    let r = ix.try_to_bytes();
    assert!(matches!(r, Err(Error::OutOfMemory(_))), "{r:?}");
    let r = ix.contains(5);
    assert!(matches!(r, Err(Error::OutOfMemory(_))), "{r:?}");
    ctx.set_memory_cap(file.len());
    assert_eq!(ix.try_to_bytes().unwrap(), file);
    ctx.set_memory_cap(0);
    assert!(ix.contains(5).unwrap());
}
