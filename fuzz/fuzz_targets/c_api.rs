//! Sequences of C ABI calls with arbitrary arguments (parameters, sizes, values including NaN
//! and huge ones, NULL pointers, short buffers) on one context: every call returns a status,
//! none crashes, and buffers are written only as far as the caller said they reach.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use std::ptr::{null, null_mut};
use vlc_compress::ffi::*;

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
        vlcc_compressor_set_param(s.c, 1, 4.0);
        vlcc_compressor_set_param(s.c, 2, 4.0);
        vlcc_compressor_set_param(s.c, 6, 3.0);
        vlcc_compressor_set_param(s.c, 17, 3.0);
        vlcc_compressor_set_param(s.c, 19, 2.0);
        for (step, op) in input.ops.iter().take(16).enumerate() {
            match *op {
                Op::SetParam { id, value } => {
                    if !slow(id, value) {
                        vlcc_compressor_set_param(s.c, id as u32, value);
                    }
                }
                Op::GetParam { id } => {
                    let mut out = 0f64;
                    vlcc_compressor_get_param(s.c, id as u32, &mut out);
                    vlcc_compressor_get_param(s.c, id as u32, null_mut());
                }
                Op::Train { n, d } => {
                    let (n, d) = (n as usize % 600, d as usize % 24);
                    let x = floats(v, n * d, step);
                    if vlcc_compressor_train(s.c, x.as_ptr(), n, d) == vlcc_status::Ok {
                        s.d = d;
                    }
                }
                Op::Encode {
                    n,
                    out_short,
                    null_out,
                } => {
                    let mut cs = 0usize;
                    if vlcc_compressor_codec_size(s.c, &mut cs) != vlcc_status::Ok {
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
                    vlcc_compressor_encode(s.c, x.as_ptr(), n, p, len);
                }
                Op::Decode { n, out_short } => {
                    let mut cs = 0usize;
                    if vlcc_compressor_codec_size(s.c, &mut cs) != vlcc_status::Ok {
                        continue;
                    }
                    let n = n as usize % 300;
                    let codes: Vec<u8> = (0..n * cs)
                        .map(|i| v.get(i % v.len().max(1)).copied().unwrap_or(0) as u8)
                        .collect();
                    let len = (n * s.d).saturating_sub(out_short as usize);
                    let mut out = vec![0f32; len];
                    vlcc_compressor_decode(s.c, codes.as_ptr(), n, out.as_mut_ptr(), len);
                }
                Op::NewIndex => {
                    let mut ix = null_mut();
                    if vlcc_index_new(s.c, &mut ix) == vlcc_status::Ok {
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
                    vlcc_index_add(s.ix, x.as_ptr(), n, p);
                }
                Op::Search {
                    nq,
                    k,
                    nprobe,
                    rerank,
                    raw_n,
                } => {
                    let (nq, k) = (nq as usize % 8, k as usize % 64);
                    let q = floats(v, nq * s.d, step + 1);
                    let raw = floats(v, raw_n as usize * s.d, step + 2);
                    let mut ids = vec![0u64; nq * k];
                    let mut dist = vec![0f32; nq * k];
                    let mut p = null_mut();
                    assert_eq!(vlcc_search_params_new(&mut p), vlcc_status::Ok);
                    let mut st = vlcc_status::Ok;
                    for (id, v) in [
                        (vlcc_search_param::K, k as f64),
                        (vlcc_search_param::Nprobe, nprobe as f64),
                        (vlcc_search_param::Rerank, rerank as f64),
                    ] {
                        if st == vlcc_status::Ok {
                            st = vlcc_search_params_set(p, id as u32, v);
                        }
                    }
                    if st == vlcc_status::Ok {
                        st = vlcc_index_search(
                            s.ix,
                            q.as_ptr(),
                            nq,
                            p,
                            raw.as_ptr(),
                            raw_n as usize,
                            ids.as_mut_ptr(),
                            dist.as_mut_ptr(),
                        );
                    }
                    vlcc_search_params_free(p);
                    if st == vlcc_status::Ok {
                        assert!(dist.iter().all(|d| !d.is_nan()), "NaN distance with OK");
                        assert!(ids
                            .iter()
                            .zip(&dist)
                            .all(|(&i, d)| i != u64::MAX || d.is_infinite()));
                    }
                }
                Op::Remove { ref ids } => {
                    let mut removed = 0usize;
                    vlcc_index_remove(s.ix, ids.as_ptr(), ids.len(), &mut removed);
                }
                Op::Stats => {
                    let mut info = vlcc_index_info::default();
                    vlcc_index_stats(s.ix, &mut info);
                    let mut n = 0usize;
                    vlcc_index_size(s.ix, &mut n);
                }
                Op::Reconstruct { len } => {
                    let mut n = 0usize;
                    if vlcc_index_size(s.ix, &mut n) != vlcc_status::Ok || n > 4096 {
                        continue;
                    }
                    let len = len as usize % (n + 2);
                    let mut ids = vec![0u64; len];
                    let mut x = vec![0f32; len * s.d];
                    let mut got = 0usize;
                    vlcc_index_reconstruct(s.ix, ids.as_mut_ptr(), x.as_mut_ptr(), len, &mut got);
                }
                Op::RoundTrip => {
                    let path = std::env::temp_dir()
                        .join(format!("vlcc-fuzz-api-{}.vlcc", std::process::id()));
                    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
                    if vlcc_index_save(s.ix, c.as_ptr()) == vlcc_status::Ok {
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
                    if vlcc_index_serialize(s.ix, &mut buf) == vlcc_status::Ok {
                        let mut other = null_mut();
                        assert_eq!(
                            vlcc_index_deserialize(s.ctx, buf.data, buf.len, &mut other),
                            vlcc_status::Ok
                        );
                        vlcc_index_merge(s.ix, other);
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
                    let st = vlcc_index_add_device(s.ix, x.as_ptr(), n as usize, ids.as_ptr());
                    assert_ne!(st, vlcc_status::Ok);
                }
            }
        }
    }
});
