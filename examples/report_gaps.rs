//! How often long calls report, and how soon a cancel takes effect: trains with the default
//! parameters on a vectors file, then adds it to an index, and prints per phase the largest
//! gap between two reports; then cancels a training and an add at a few points and prints
//! how long each took to return after the callback said stop.
//!
//!     cargo run --release --example report_gaps -- BASE.fvecs BYTES [THREADS]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vlc_compress::{vecio, BackendKind, Compressor, Context, Phase, TrainParams};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (path, bytes) = (&args[1], args[2].parse::<usize>()?);
    let threads = args.get(3).map_or(Ok(2), |t| t.parse())?;
    let x = vecio::read_vectors(std::path::Path::new(path))?;
    let ctx = Arc::new(Context::new(BackendKind::Cpu, 0, threads)?);
    let params = TrainParams {
        bytes_per_vector: bytes,
        ..TrainParams::default()
    };

    // Gaps: the time since the previous report, kept per phase.
    let log: Mutex<(Instant, Vec<(Phase, Duration)>)> = Mutex::new((Instant::now(), Vec::new()));
    let hear = |phase: Phase, _: u64, _: u64| {
        let mut l = log.lock().unwrap();
        let now = Instant::now();
        let gap = now - l.0;
        l.0 = now;
        l.1.push((phase, gap));
        true
    };
    let mut c = Compressor::new(ctx.clone(), params.clone());
    let t = Instant::now();
    c.train_with_progress(&x.data, x.cols, &hear)?;
    let train = t.elapsed();
    let mut ix = c.new_index()?;
    let ids: Vec<u64> = (0..x.rows as u64).collect();
    log.lock().unwrap().0 = Instant::now();
    ix.add_with_progress(&x.data[..], &ids, &hear)?;
    println!(
        "{path}: {} x {}, {bytes} B, {threads} threads, training {:.1} s",
        x.rows,
        x.cols,
        train.as_secs_f64()
    );
    let gaps = log.into_inner().unwrap().1;
    for phase in [Phase::Anchors, Phase::Codebooks, Phase::Encode] {
        let mut g: Vec<f64> = gaps
            .iter()
            .filter(|r| r.0 == phase)
            .map(|r| r.1.as_secs_f64() * 1e3)
            .collect();
        g.sort_by(f64::total_cmp);
        if let (Some(max), false) = (g.last(), g.is_empty()) {
            println!(
                "  {:>9}: {:>4} reports, largest gap {:>6.1} ms, median {:>6.1} ms",
                phase.name(),
                g.len(),
                max,
                g[g.len() / 2]
            );
        }
    }

    // What listening costs: encoding with and without a callback, alternating, best of 5.
    let (mut plain, mut heard) = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        let t = Instant::now();
        c.encode(x.data[..].into())?;
        plain = plain.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        c.encode_with_progress(x.data[..].into(), &|_: Phase, _: u64, _: u64| true)?;
        heard = heard.min(t.elapsed().as_secs_f64());
    }
    println!(
        "  encode: {:.0} vectors/s without a callback, {:.0} with (best of 5 each, alternating)",
        x.rows as f64 / plain,
        x.rows as f64 / heard
    );

    // Cancels: stop once `after` has passed, and time the return.
    for frac in [0.1, 0.5, 0.8] {
        let after = train.mul_f64(frac);
        let said: Mutex<Option<Instant>> = Mutex::new(None);
        let start = Instant::now();
        let stop = |_: Phase, _: u64, _: u64| {
            let mut s = said.lock().unwrap();
            if s.is_none() && start.elapsed() >= after {
                *s = Some(Instant::now());
            }
            s.is_none()
        };
        let mut fresh = Compressor::new(ctx.clone(), params.clone());
        let r = fresh.train_with_progress(&x.data, x.cols, &stop);
        let back = said
            .into_inner()
            .unwrap()
            .map(|t| t.elapsed().as_secs_f64() * 1e3);
        println!(
            "  train cancelled at {:.0}% ({:.2} s): {} {:.1} ms after the callback said stop",
            frac * 100.0,
            after.as_secs_f64(),
            if r.is_err() { "returned" } else { "FINISHED" },
            back.unwrap_or(f64::NAN)
        );
    }
    Ok(())
}
