//! Codec mode: round-trip error bounds, f16 input, code layout, bad input.

mod common;
use vlc_compress::{Compressor, Error, Rotation, Vectors};

fn mse(a: &[f32], b: &[f32], d: usize) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| ((x - y) * (x - y)) as f64)
        .sum::<f64>()
        / (a.len() / d) as f64
}

#[test]
fn round_trip_error_is_bounded_and_shrinks_with_bytes() {
    let demo = common::demo();
    let d = demo.base.cols;
    let x = &demo.base.data[..8000 * d];
    let var: f64 = {
        let n = (x.len() / d) as f64;
        let mut mean = vec![0f64; d];
        for r in x.chunks_exact(d) {
            for t in 0..d {
                mean[t] += r[t] as f64 / n;
            }
        }
        x.chunks_exact(d)
            .map(|r| (0..d).map(|t| (r[t] as f64 - mean[t]).powi(2)).sum::<f64>())
            .sum::<f64>()
            / n
    };
    let mut last = f64::INFINITY;
    for (bytes, bits, rot) in [
        (4, 8, Rotation::None),
        (8, 4, Rotation::Random),
        (16, 8, Rotation::None),
        (32, 8, Rotation::Learned),
    ] {
        let mut p = common::small_params(64, bytes);
        p.bits = bits;
        p.rotation = rot;
        let mut c = Compressor::new(common::ctx(2), p);
        c.train(x, d).unwrap();
        let cb = c.codebook().unwrap();
        let codes = c.encode(x.into()).unwrap();
        assert_eq!(codes.len(), (x.len() / d) * cb.codec_size());
        assert_eq!(cb.codec_size(), 1 + bytes, "64 anchors need a 1-byte id");
        let y = c.decode(&codes).unwrap();
        let e = mse(x, &y, d);
        // Relative error well under the data's own variance, and better with more bytes.
        assert!(
            e < 0.5 * var,
            "{bytes} B {bits} bits {rot:?}: mse {e} vs variance {var}"
        );
        assert!(e < last, "{bytes} B: mse {e} not below {last}");
        last = e;
        // Decoding is deterministic and re-encoding a decoded vector is stable for most rows.
        assert_eq!(c.decode(&codes).unwrap(), y);
    }
    assert!(
        last < 0.15 * var,
        "32 B learned rotation: mse {last} vs variance {var}"
    );
}

#[test]
fn f16_input_encodes_like_its_f32_values() {
    let d = 24;
    let x = common::clustered(3000, d, 16, 11);
    let x16: Vec<half::f16> = x.iter().map(|&v| half::f16::from_f32(v)).collect();
    let x16_as_32: Vec<f32> = x16.iter().map(|v| v.to_f32()).collect();
    let mut c = Compressor::new(common::ctx(2), common::small_params(32, 8));
    c.train(&x, d).unwrap();
    let a = c.encode(Vectors::F16(&x16)).unwrap();
    let b = c.encode(Vectors::F32(&x16_as_32)).unwrap();
    assert_eq!(a, b);
}

#[test]
fn codec_rejects_bad_input() {
    let d = 8;
    let x = common::clustered(500, d, 8, 5);
    let mut c = Compressor::new(common::ctx(1), common::small_params(8, 4));
    assert!(
        matches!(c.encode(x[..].into()), Err(Error::InvalidState(_))),
        "encode before train"
    );
    c.train(&x, d).unwrap();
    assert!(matches!(
        c.encode(x[..13].into()),
        Err(Error::InvalidArgument(_))
    ));
    let mut nan = x[..d * 4].to_vec();
    nan[3] = f32::INFINITY;
    assert!(matches!(c.encode(nan[..].into()), Err(Error::NonFinite(_))));
    let cs = c.codebook().unwrap().codec_size();
    assert!(matches!(
        c.decode(&vec![0u8; cs + 1]),
        Err(Error::InvalidArgument(_))
    ));
    let mut bad = c.encode(x[..d].into()).unwrap();
    bad[0] = 200; // anchor id beyond the 8 anchors
    assert!(matches!(c.decode(&bad), Err(Error::InvalidArgument(_))));
    assert!(c.encode(x[..0].into()).unwrap().is_empty());
}
