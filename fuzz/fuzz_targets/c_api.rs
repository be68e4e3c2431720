//! Sequences of C ABI calls with arbitrary arguments (parameters, sizes, values including NaN
//! and huge ones, NULL pointers, short buffers, filters of any claimed size, overlapping
//! outputs, progress callbacks that cancel, deadlines, memory caps, estimates of absurd sizes)
//! on one context. Every call returns a status the header defines, never
//! `VLCC_STATUS_PANIC` (the library catches a panic and keeps quiet about it: here it is a
//! crash); buffers are written only as far as the caller said they reach; and what an OK
//! call returns keeps the documented contract (an empty slot is id `VLCC_NO_ID` with a NaN
//! distance, and only there; filtered searches return allowed ids only).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use std::ffi::c_void;
use std::ptr::{null, null_mut};
use vlc_compress::ffi::range::*;
use vlc_compress::ffi::*;

/// A search's filter.
#[derive(Arbitrary, Debug)]
enum FilterKind {
    None,
    /// Bytes, and the bits they claim to hold (at most what the bytes hold, or past what
    /// memory holds: the call must refuse those).
    Bitset { bytes: Vec<u8>, claim: u64 },
    /// Ids, in the caller's order (unsorted ones are refused).
    Ids { ids: Vec<u64> },
    /// A predicate: ids divisible by `modulo + 1`.
    Predicate { modulo: u8 },
}

/// Which outputs of `vlcc_index_search_bounds` share memory (0: none).
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Alias {
    None,
    LowerIsUpper,
    UpperInIds,
    LowerInQueries,
    DistancesInLower,
}

#[derive(Arbitrary, Debug)]
enum Op {
    SetParam {
        id: u8,
        value: f64,
    },
    GetParam {
        id: u8,
    },
    Train {
        n: u16,
        d: u8,
    },
    Encode {
        n: u16,
        out_short: u8,
        null_out: bool,
    },
    Decode {
        n: u16,
        out_short: u8,
    },
    NewIndex,
    Add {
        n: u16,
        id_base: u64,
        null_ids: bool,
    },
    Search {
        nq: u8,
        k: u16,
        nprobe: u32,
        rerank: u32,
        raw_n: u16,
        filter: FilterKind,
        cancel_after: Option<u8>,
        timeout_ms: u8,
        fetch: bool,
    },
    Range {
        nq: u8,
        nprobe: u32,
        radius: f32,
        filter: FilterKind,
        cancel_after: Option<u8>,
    },
    Bounds {
        nq: u8,
        k: u8,
        nprobe: u32,
        rerank: u16,
        auto: bool,
        alias: Alias,
    },
    NewBoundedIndex {
        refine: u8,
    },
    MemoryCap {
        /// In KiB (0: none).
        kib: u32,
    },
    ContextTimeout {
        ms: u8,
    },
    Estimate {
        work: u8,
        n: u64,
        d: u64,
    },
    Remove {
        ids: Vec<u64>,
    },
    Stats,
    Reconstruct {
        len: u16,
    },
    RoundTrip,
    MergeCopy,
    Serialize,
    DeviceAdd {
        n: u8,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// Values the vectors of every call are drawn from (raw bit patterns: NaN, inf, huge).
    values: Vec<u32>,
    ops: Vec<Op>,
}

/// `n` floats cycled from the input's values (zeros when it gave none).
fn floats(values: &[u32], n: usize, salt: usize) -> Vec<f32> {
    if values.is_empty() {
        return vec![0.0; n];
    }
    (0..n)
        .map(|i| f32::from_bits(values[(i + salt) % values.len()]))
        .collect()
}

/// Parameters whose large values only make training slow (a time-out, not a finding).
fn slow(id: u8, v: f64) -> bool {
    matches!(id, 6 | 17 | 19) && v > 8.0 || matches!(id, 1) && v > 64.0
}

/// `st`, checked: a status the header defines, and never a caught panic.
fn ok(st: vlcc_status) -> vlcc_status {
    let n = st as u32;
    // SAFETY: vlcc_status_str returns a static NUL-terminated string for every number.
    let name = unsafe { std::ffi::CStr::from_ptr(vlcc_status_str(n)) };
    assert_ne!(name.to_bytes(), b"VLCC_STATUS_UNKNOWN", "status {n} is not in the header");
    assert_ne!(st, vlcc_status::Panic, "the library caught a panic");
    st
}

/// A progress callback that cancels after `*user` reports.
unsafe extern "C" fn cancel_later(user: *mut c_void, _: vlcc_phase, done: u64, total: u64) -> i32 {
    assert!(done <= total, "progress past its total: {done} of {total}");
    let left = &mut *(user as *mut u32);
    if *left == 0 {
        return 1;
    }
    *left -= 1;
    0
}

/// Allows ids divisible by `*user`.
unsafe extern "C" fn divisible(user: *mut c_void, id: u64) -> i32 {
    (id % *(user as *const u64) == 0) as i32
}

/// Fetches rows of `*user`'s dimension: row i is all `id` as a float; id 13 fails.
unsafe extern "C" fn fetch_rows(user: *mut c_void, ids: *const u64, n: usize, out: *mut f32) -> i32 {
    let d = *(user as *const usize);
    let ids = std::slice::from_raw_parts(ids, n);
    let out = std::slice::from_raw_parts_mut(out, n * d);
    for (i, &id) in ids.iter().enumerate() {
        if id == 13 {
            return -1;
        }
        out[i * d..(i + 1) * d].fill(id as f32);
    }
    0
}

/// Whether a filter allows `id` (None: no filter, or one the call refused).
fn allowed(f: &FilterKind, id: u64) -> bool {
    match f {
        FilterKind::None => true,
        FilterKind::Bitset { bytes, claim } => {
            id < *claim && bytes.get((id / 8) as usize).is_some_and(|b| b >> (id % 8) & 1 == 1)
        }
        FilterKind::Ids { ids } => ids.contains(&id),
        FilterKind::Predicate { modulo } => id % (*modulo as u64 + 1) == 0,
    }
}

/// Sets `f` on `p`: the status of the setter.
unsafe fn set_filter(p: *mut vlcc_search_params, f: &FilterKind, modulo: &mut u64) -> vlcc_status {
    ok(match f {
        FilterKind::None => vlcc_status::Ok,
        FilterKind::Bitset { bytes, claim } => {
            // A C caller that claims more bytes than its array holds is undefined behaviour
            // the call cannot see; only claims past what memory holds, refused before any
            // read, may exceed the bytes.
            let honest = claim.div_ceil(8) <= bytes.len() as u64 || *claim >= 1 << 62;
            let claim = if honest { *claim } else { bytes.len() as u64 * 8 };
            vlcc_search_params_set_filter_bitset(p, bytes.as_ptr(), claim)
        }
        FilterKind::Ids { ids } => vlcc_search_params_set_filter_ids(p, ids.as_ptr(), ids.len()),
        FilterKind::Predicate { modulo: m } => {
            *modulo = *m as u64 + 1;
            vlcc_search_params_set_filter_callback(p, Some(divisible), modulo as *mut u64 as *mut c_void)
        }
    })
}

/// Every OK result slot is empty (id VLCC_NO_ID, distance NaN) or holds an allowed id and a
/// number.
fn check_slots(ids: &[u64], dist: &[f32], f: &FilterKind) {
    for (&i, d) in ids.iter().zip(dist) {
        assert_eq!(i == u64::MAX, d.is_nan(), "slot id {i} with distance {d}");
        assert!(i == u64::MAX || allowed(f, i), "id {i} passed the filter {f:?}");
    }
}

struct State {
    ctx: *mut vlcc_context,
    c: *mut vlcc_compressor,
    ix: *mut vlcc_index,
    d: usize,
}

impl Drop for State {
    fn drop(&mut self) {
        // SAFETY: each handle is NULL or owned by this state.
        unsafe {
            vlcc_index_free(self.ix);
            vlcc_compressor_free(self.c);
            vlcc_context_free(self.ctx);
        }
    }
}

fuzz_target!(|input: Input| {
    let v = &input.values;
    let mut s = State {
        ctx: null_mut(),
        c: null_mut(),
        ix: null_mut(),
        d: 0,
    };
    // SAFETY (whole target): every pointer passed is NULL on purpose or valid for the length
    // the call is told; handles are the state's own.
    unsafe {
        assert_eq!(vlcc_context_new(1, 0, 1, &mut s.ctx), vlcc_status::Ok);
        assert_eq!(vlcc_compressor_new(s.ctx, &mut s.c), vlcc_status::Ok);
        // Small defaults so that training on a few hundred vectors can succeed.
        ok(vlcc_compressor_set_param(s.c, 1, 4.0));
        ok(vlcc_compressor_set_param(s.c, 2, 4.0));
        ok(vlcc_compressor_set_param(s.c, 6, 3.0));
        ok(vlcc_compressor_set_param(s.c, 17, 3.0));
        ok(vlcc_compressor_set_param(s.c, 19, 2.0));
        for (step, op) in input.ops.iter().take(16).enumerate() {
            match *op {
                Op::SetParam { id, value } => {
                    if !slow(id, value) {
                        ok(vlcc_compressor_set_param(s.c, id as u32, value));
                    }
                }
                Op::GetParam { id } => {
                    let mut out = 0f64;
                    ok(vlcc_compressor_get_param(s.c, id as u32, &mut out));
                    ok(vlcc_compressor_get_param(s.c, id as u32, null_mut()));
                }
                Op::Train { n, d } => {
                    let (n, d) = (n as usize % 600, d as usize % 24);
                    let x = floats(v, n * d, step);
                    if ok(vlcc_compressor_train(s.c, x.as_ptr(), n, d)) == vlcc_status::Ok {
                        s.d = d;
                    }
                }
                Op::Encode {
                    n,
                    out_short,
                    null_out,
                } => {
                    let mut cs = 0usize;
                    if ok(vlcc_compressor_codec_size(s.c, &mut cs)) != vlcc_status::Ok {
                        continue;
                    }
                    let n = n as usize % 300;
                    let x = floats(v, n * s.d, step);
                    let len = (n * cs).saturating_sub(out_short as usize);
                    let mut out = vec![0u8; len];
                    let p = if null_out {
                        null_mut()
                    } else {
                        out.as_mut_ptr()
                    };
                    ok(vlcc_compressor_encode(s.c, x.as_ptr(), n, p, len));
                }
                Op::Decode { n, out_short } => {
                    let mut cs = 0usize;
                    if ok(vlcc_compressor_codec_size(s.c, &mut cs)) != vlcc_status::Ok {
                        continue;
                    }
                    let n = n as usize % 300;
                    let codes: Vec<u8> = (0..n * cs)
                        .map(|i| v.get(i % v.len().max(1)).copied().unwrap_or(0) as u8)
                        .collect();
                    let len = (n * s.d).saturating_sub(out_short as usize);
                    let mut out = vec![0f32; len];
                    ok(vlcc_compressor_decode(s.c, codes.as_ptr(), n, out.as_mut_ptr(), len));
                }
                Op::NewIndex => {
                    let mut ix = null_mut();
                    if ok(vlcc_index_new(s.c, &mut ix)) == vlcc_status::Ok {
                        vlcc_index_free(s.ix);
                        s.ix = ix;
                    }
                }
                Op::Add {
                    n,
                    id_base,
                    null_ids,
                } => {
                    let n = n as usize % 400;
                    let x = floats(v, n * s.d, step);
                    let ids: Vec<u64> =
                        (0..n as u64).map(|i| id_base.wrapping_add(i * 7)).collect();
                    let p = if null_ids { null() } else { ids.as_ptr() };
                    ok(vlcc_index_add(s.ix, x.as_ptr(), n, p));
                }
                Op::Search {
                    nq,
                    k,
                    nprobe,
                    rerank,
                    raw_n,
                    ref filter,
                    cancel_after,
                    timeout_ms,
                    fetch,
                } => {
                    let (nq, k) = (nq as usize % 8, k as usize % 64);
                    let q = floats(v, nq * s.d, step + 1);
                    let raw = floats(v, raw_n as usize * s.d, step + 2);
                    let mut ids = vec![0u64; nq * k];
                    let mut dist = vec![0f32; nq * k];
                    let mut p = null_mut();
                    assert_eq!(vlcc_search_params_new(&mut p), vlcc_status::Ok);
                    let (mut modulo, mut d) = (1u64, s.d);
                    let mut left = cancel_after.unwrap_or(0) as u32;
                    let mut st = vlcc_status::Ok;
                    for (id, v) in [
                        (vlcc_search_param::K, k as f64),
                        (vlcc_search_param::Nprobe, nprobe as f64),
                        (vlcc_search_param::Rerank, rerank as f64),
                        (vlcc_search_param::TimeoutMs, (timeout_ms % 4) as f64),
                    ] {
                        if st == vlcc_status::Ok {
                            st = ok(vlcc_search_params_set(p, id as u32, v));
                        }
                    }
                    let set = set_filter(p, filter, &mut modulo);
                    if cancel_after.is_some() {
                        let user = &mut left as *mut u32 as *mut c_void;
                        assert_eq!(vlcc_search_params_set_progress(p, Some(cancel_later), user), vlcc_status::Ok);
                    }
                    let raw_p = if fetch {
                        let user = &mut d as *mut usize as *mut c_void;
                        assert_eq!(vlcc_search_params_set_fetch(p, Some(fetch_rows), user), vlcc_status::Ok);
                        null()
                    } else {
                        raw.as_ptr()
                    };
                    let raw_n = if fetch { 0 } else { raw_n as usize };
                    if st == vlcc_status::Ok {
                        st = ok(vlcc_index_search(
                            s.ix,
                            q.as_ptr(),
                            nq,
                            p,
                            raw_p,
                            raw_n,
                            ids.as_mut_ptr(),
                            dist.as_mut_ptr(),
                        ));
                    }
                    vlcc_search_params_free(p);
                    if st == vlcc_status::Ok {
                        let f = if set == vlcc_status::Ok { filter } else { &FilterKind::None };
                        check_slots(&ids, &dist, f);
                    }
                }
                Op::Range {
                    nq,
                    nprobe,
                    radius,
                    ref filter,
                    cancel_after,
                } => {
                    let nq = nq as usize % 8;
                    let q = floats(v, nq * s.d, step + 1);
                    let mut p = null_mut();
                    assert_eq!(vlcc_search_params_new(&mut p), vlcc_status::Ok);
                    ok(vlcc_search_params_set(p, vlcc_search_param::Nprobe as u32, nprobe as f64));
                    let mut modulo = 1u64;
                    let mut left = cancel_after.unwrap_or(0) as u32;
                    let set = set_filter(p, filter, &mut modulo);
                    if cancel_after.is_some() {
                        let user = &mut left as *mut u32 as *mut c_void;
                        assert_eq!(vlcc_search_params_set_progress(p, Some(cancel_later), user), vlcc_status::Ok);
                    }
                    let mut rr = null_mut();
                    let st = ok(vlcc_index_range_search(s.ix, q.as_ptr(), nq, p, radius, null(), 0, &mut rr));
                    vlcc_search_params_free(p);
                    assert_eq!(st == vlcc_status::Ok, !rr.is_null(), "range results only with OK");
                    if st == vlcc_status::Ok {
                        let (mut n, mut off, mut ri, mut rd) = (0usize, null(), null(), null());
                        assert_eq!(vlcc_range_results_view(rr, &mut n, &mut off, &mut ri, &mut rd), vlcc_status::Ok);
                        assert_eq!(n, nq);
                        let off = std::slice::from_raw_parts(off, n + 1);
                        assert!(off[0] == 0 && off.windows(2).all(|w| w[0] <= w[1]));
                        let hits = off[n];
                        let (ri, rd) = if hits == 0 {
                            (&[][..], &[][..])
                        } else {
                            (std::slice::from_raw_parts(ri, hits), std::slice::from_raw_parts(rd, hits))
                        };
                        let f = if set == vlcc_status::Ok { filter } else { &FilterKind::None };
                        for (&i, d) in ri.iter().zip(rd) {
                            assert!(i != u64::MAX && !d.is_nan(), "range hit {i} at {d}");
                            assert!(allowed(f, i), "range hit {i} passed the filter {f:?}");
                        }
                        vlcc_range_results_free(rr);
                    }
                }
                Op::Bounds {
                    nq,
                    k,
                    nprobe,
                    rerank,
                    auto,
                    alias,
                } => {
                    let (nq, k) = (nq as usize % 8, (k as usize % 16).max(1));
                    let mut q = floats(v, nq * s.d.max(1) * 4, step + 1);
                    let mut p = null_mut();
                    assert_eq!(vlcc_search_params_new(&mut p), vlcc_status::Ok);
                    ok(vlcc_search_params_set(p, vlcc_search_param::K as u32, k as f64));
                    ok(vlcc_search_params_set(p, vlcc_search_param::Nprobe as u32, nprobe as f64));
                    ok(vlcc_search_params_set(p, vlcc_search_param::Rerank as u32, rerank as f64));
                    ok(vlcc_search_params_set(p, vlcc_search_param::RerankAuto as u32, auto as u8 as f64));
                    let mut ids = vec![0u64; nq * k * 2];
                    let mut dist = vec![0f32; nq * k];
                    let mut lower = vec![0f32; nq * k * 2];
                    let mut upper = vec![0f32; nq * k];
                    let mut reranked = vec![0u64; nq];
                    let mut cert = vec![0u8; nq];
                    let (mut lo, mut up, mut dp) = (lower.as_mut_ptr(), upper.as_mut_ptr(), dist.as_mut_ptr());
                    match alias {
                        Alias::None => {}
                        Alias::LowerIsUpper => up = lo,
                        Alias::UpperInIds => up = ids.as_mut_ptr().add(nq * k) as *mut f32,
                        Alias::LowerInQueries => lo = q.as_mut_ptr(),
                        Alias::DistancesInLower => dp = lo.add(nq * k / 2),
                    }
                    let st = ok(vlcc_index_search_bounds(
                        s.ix, q.as_ptr(), nq, p, null(), 0, ids.as_mut_ptr(), dp, lo, up,
                        reranked.as_mut_ptr(), cert.as_mut_ptr(),
                    ));
                    vlcc_search_params_free(p);
                    if !matches!(alias, Alias::None) && nq > 0 {
                        assert_ne!(st, vlcc_status::Ok, "overlapping outputs {alias:?} accepted");
                    }
                    if st == vlcc_status::Ok {
                        check_slots(&ids[..nq * k], &dist, &FilterKind::None);
                        for ((l, u), d) in lower.iter().zip(&upper).zip(&dist) {
                            assert_eq!(l.is_nan(), d.is_nan(), "bounds {l}..{u} of {d}");
                        }
                    }
                }
                Op::NewBoundedIndex { refine } => {
                    let mut ix = null_mut();
                    if ok(vlcc_index_new_with_refine(s.c, (refine % 5) as u32, &mut ix)) == vlcc_status::Ok {
                        vlcc_index_free(s.ix);
                        s.ix = ix;
                    }
                }
                Op::MemoryCap { kib } => {
                    ok(vlcc_context_set_memory_cap(s.ctx, kib as usize * 1024));
                }
                Op::ContextTimeout { ms } => {
                    ok(vlcc_context_set_timeout(s.ctx, (ms % 3) as u64));
                }
                Op::Estimate { work, n, d } => {
                    let (mut host, mut dev) = (0u64, 0u64);
                    let w = (work % 4) as u32;
                    let st = ok(vlcc_estimate_memory(s.c, w, n as usize, d as usize, &mut host, &mut dev));
                    if st == vlcc_status::Ok && n > 0 && d > 0 {
                        assert!(host > 0, "an estimate of nothing for {n} x {d}");
                    }
                    ok(vlcc_index_estimate_memory(s.ix, w, n as usize, null(), &mut host, &mut dev));
                }
                Op::Remove { ref ids } => {
                    let mut removed = 0usize;
                    ok(vlcc_index_remove(s.ix, ids.as_ptr(), ids.len(), &mut removed));
                }
                Op::Stats => {
                    let mut info = vlcc_index_info::default();
                    ok(vlcc_index_stats(s.ix, &mut info));
                    let mut n = 0usize;
                    ok(vlcc_index_size(s.ix, &mut n));
                }
                Op::Reconstruct { len } => {
                    let mut n = 0usize;
                    if ok(vlcc_index_size(s.ix, &mut n)) != vlcc_status::Ok || n > 4096 {
                        continue;
                    }
                    let len = len as usize % (n + 2);
                    let mut ids = vec![0u64; len];
                    let mut x = vec![0f32; len * s.d];
                    let mut got = 0usize;
                    ok(vlcc_index_reconstruct(s.ix, ids.as_mut_ptr(), x.as_mut_ptr(), len, &mut got));
                }
                Op::RoundTrip => {
                    let path = std::env::temp_dir()
                        .join(format!("vlcc-fuzz-api-{}.vlcc", std::process::id()));
                    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
                    if ok(vlcc_index_save(s.ix, c.as_ptr())) == vlcc_status::Ok {
                        let mut ix = null_mut();
                        assert_eq!(
                            vlcc_index_load(s.ctx, c.as_ptr(), 1, &mut ix),
                            vlcc_status::Ok
                        );
                        vlcc_index_free(s.ix);
                        s.ix = ix;
                    }
                    let mut c2 = null_mut();
                    if vlcc_compressor_save_codebook(s.c, c.as_ptr()) == vlcc_status::Ok {
                        assert_eq!(
                            vlcc_compressor_load_codebook(s.ctx, c.as_ptr(), &mut c2),
                            vlcc_status::Ok
                        );
                        vlcc_compressor_free(c2);
                    }
                }
                Op::MergeCopy => {
                    let mut buf = vlcc_buffer {
                        data: null_mut(),
                        len: 0,
                    };
                    if ok(vlcc_index_serialize(s.ix, &mut buf)) == vlcc_status::Ok {
                        let mut other = null_mut();
                        assert_eq!(
                            vlcc_index_deserialize(s.ctx, buf.data, buf.len, &mut other),
                            vlcc_status::Ok
                        );
                        ok(vlcc_index_merge(s.ix, other));
                        vlcc_index_free(other);
                        vlcc_buffer_free(&mut buf);
                    }
                }
                Op::Serialize => {
                    let mut buf = vlcc_buffer {
                        data: null_mut(),
                        len: 0,
                    };
                    if vlcc_compressor_serialize_codebook(s.c, &mut buf) == vlcc_status::Ok {
                        let mut c2 = null_mut();
                        assert_eq!(
                            vlcc_compressor_deserialize_codebook(s.ctx, buf.data, buf.len, &mut c2),
                            vlcc_status::Ok
                        );
                        vlcc_compressor_free(c2);
                        vlcc_buffer_free(&mut buf);
                    }
                }
                Op::DeviceAdd { n } => {
                    // A CPU context reads no device memory: refused before the pointer is used.
                    let ids = vec![1u64; n as usize];
                    let x = floats(v, n as usize * s.d, step);
                    let st = ok(vlcc_index_add_device(s.ix, x.as_ptr(), n as usize, ids.as_ptr()));
                    assert_ne!(st, vlcc_status::Ok);
                }
            }
        }
    }
});
