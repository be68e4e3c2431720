//! Progress reports and cancellation of train, encode, add and merge on the CPU.
mod common;

use std::sync::Arc;
use vlc_compress::{Compressor, Error, Phase, Progress};

#[test]
fn cancelled_calls_leave_their_objects_as_they_were() {
    common::cancel_leaves_objects_as_they_were(&common::ctx(2));
}

/// The context's callback hears the calls of objects that have none; an object's own
/// callback takes precedence.
#[test]
fn the_object_callback_takes_precedence_over_the_context_one() {
    let ctx = common::ctx(2);
    let (n, d) = (5_000, 32);
    let x = common::clustered(n, d, 10, 3);
    let on_ctx = Arc::new(common::CancelAt::new(usize::MAX));
    ctx.set_progress(Some(on_ctx.clone()));
    let mut c = Compressor::new(ctx.clone(), common::small_params(16, 8));
    c.train(&x, d).unwrap();
    assert!(on_ctx.count() > 0, "the context heard nothing");
    let heard = on_ctx.count();
    let stop = Arc::new(common::CancelAt::new(0));
    c.set_progress(Some(stop.clone()));
    assert!(matches!(c.encode(x[..].into()), Err(Error::Cancelled(_))));
    assert_eq!(on_ctx.count(), heard, "the context heard an object's call");
    c.set_progress(None);
    let mut ix = c.new_index().unwrap();
    let ids: Vec<u64> = (0..n as u64).collect();
    ix.add(&x[..], &ids).unwrap();
    let seen = on_ctx.seen.lock().unwrap();
    assert!(seen.iter().any(|r| r.0 == Phase::Encode && r.1 == n as u64));
    drop(seen);
    ctx.set_progress(None);
    assert!(ctx.progress().is_none());
}

/// A closure is a `Progress`.
#[test]
fn closures_report_and_cancel() {
    let ctx = common::ctx(1);
    let (n, d) = (3_000, 16);
    let x = common::clustered(n, d, 8, 4);
    let mut c = Compressor::new(ctx, common::small_params(8, 4));
    let stop_in_codebooks = |phase: Phase, _: u64, _: u64| phase != Phase::Codebooks;
    let r = c.train_with_progress(&x, d, &stop_in_codebooks);
    assert!(matches!(r, Err(Error::Cancelled(_))));
    assert!(c.codebook().is_err());
    let go_on = |_: Phase, _: u64, _: u64| true;
    assert!(go_on.report(Phase::Merge, 0, 1));
    c.train_with_progress(&x, d, &go_on).unwrap();
}
