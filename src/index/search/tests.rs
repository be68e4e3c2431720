//! Tests of the host scan: the block scan against the plain one, the query rotation, and
//! scores from queries rotated in integers.

use super::*;
use crate::backend::host_scan::scan::{scan, scan4_blocks, List};
use crate::backend::host_scan::{coarse8, fastscan, Packed};
use crate::backend::layout;

/// A seeded stream of values in [0, 1).
fn uniform(seed: u64) -> impl FnMut() -> f32 {
    let mut s = seed;
    move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// `scan` and `scan4_blocks` over one list keep the same `k`: ids, and distances to the bit.
#[allow(clippy::too_many_arguments)]
fn assert_same_scans(
    base: f32,
    lut: &[f32],
    nsub: usize,
    ids: &[u64],
    codes: &[u8],
    packed: &[u8],
    table: &mut fastscan::ByteTable,
    k: usize,
    what: &str,
) {
    let list = List { base, ids, codes };
    let mut plain = TopK::new(k);
    scan(&list, lut, 4, nsub, &mut Vec::new(), None, &mut plain).unwrap();
    let mut blocks = TopK::new(k);
    scan4_blocks(&list, lut, nsub, packed, table, None, &mut blocks).unwrap();
    let (a, b) = (plain.sorted(), blocks.sorted());
    assert_eq!(a.len(), b.len(), "{what}");
    for (x, y) in a.iter().zip(&b) {
        assert_eq!((x.0.to_bits(), x.1), (y.0.to_bits(), y.1), "{what}");
    }
}

#[test]
fn the_block_scan_keeps_what_the_plain_scan_keeps() {
    // Random codes under tables of several shapes: spread entries, entries within a hair
    // of each other (many ties in bytes), large bases (float rounding near the bound).
    let mut u = uniform(11);
    for (nsub, n, base, spread) in [
        (8usize, 1000usize, 0.0f32, 1.0f32),
        (17, 700, 3.5, 0.01),
        (64, 2000, 1e4, 2.0),
        (64, 333, -50.0, 1e-4),
        (255, 200, 7.0, 10.0),
        (256, 97, 0.5, 1.0),
    ] {
        let nbytes = nsub.div_ceil(2);
        let mut codes: Vec<u8> = (0..n * nbytes).map(|_| (u() * 256.0) as u8).collect();
        if nsub % 2 == 1 {
            for c in codes.chunks_mut(nbytes) {
                *c.last_mut().unwrap() &= 15;
            }
        }
        let ids: Vec<u64> = (0..n as u64).map(|i| i * 3 + 1).collect();
        let lut: Vec<f32> = (0..nsub * 16).map(|_| (u() - 0.3) * spread).collect();
        let packed = fastscan::pack(&codes, nsub);
        let mut table = fastscan::ByteTable::new(nsub);
        for k in [1usize, 10, 100] {
            let what = format!("nsub {nsub} n {n} base {base} spread {spread} k {k}");
            assert_same_scans(
                base, &lut, nsub, &ids, &codes, &packed, &mut table, k, &what,
            );
        }
    }
}

/// The GloVe demo vectors (50-d) in a 4-bit index of 16 B with the default (learned)
/// rotation, the vectors and the demo queries.
fn glove_demo_4bit() -> (Index, Vec<f32>, Vec<f32>) {
    use crate::backend::BackendKind;
    use crate::compressor::Compressor;
    use crate::context::Context;
    use crate::params::TrainParams;
    let base =
        crate::vecio::parse_fvecs(include_bytes!("../../../tests/data/glove-demo/base.fvecs"))
            .unwrap();
    let query =
        crate::vecio::parse_fvecs(include_bytes!("../../../tests/data/glove-demo/query.fvecs"))
            .unwrap();
    let ctx = std::sync::Arc::new(Context::new(BackendKind::Cpu, 0, 2).unwrap());
    let mut p = TrainParams {
        bytes_per_vector: 16,
        bits: 4,
        ..TrainParams::default()
    };
    p.anchor.anchors = 64;
    let mut c = Compressor::new(ctx, p);
    c.train(&base.data, base.cols).unwrap();
    let mut ix = c.new_index().unwrap();
    let ids: Vec<u64> = (0..base.rows as u64).collect();
    ix.add(&base.data[..], &ids).unwrap();
    (ix, base.data, query.data)
}

/// The GloVe demo vectors and queries joined in pairs (100-d) in an 8-bit index of 12 B
/// (under a bit a dimension: queries rotated in integers where the CPU can), and the
/// queries.
fn glove_demo_wide(metric: Metric) -> (Index, Vec<f32>) {
    use crate::backend::BackendKind;
    use crate::compressor::Compressor;
    use crate::context::Context;
    use crate::params::TrainParams;
    let read = |b: &[u8]| crate::vecio::parse_fvecs(b).unwrap().data;
    let base = read(include_bytes!("../../../tests/data/glove-demo/base.fvecs"));
    let query = read(include_bytes!("../../../tests/data/glove-demo/query.fvecs"));
    let d = 100;
    let ctx = std::sync::Arc::new(Context::new(BackendKind::Cpu, 0, 2).unwrap());
    let mut p = TrainParams {
        bytes_per_vector: 12,
        metric,
        ..TrainParams::default()
    };
    p.anchor.anchors = 64;
    let mut c = Compressor::new(ctx, p);
    c.train(&base, d).unwrap();
    let mut ix = c.new_index().unwrap();
    let ids: Vec<u64> = (0..(base.len() / d) as u64).collect();
    ix.add(&base[..], &ids).unwrap();
    (ix, query)
}

#[test]
fn scores_from_queries_rotated_in_integers_stay_within_their_slack() {
    if !coarse8::supported() {
        return;
    }
    for metric in [Metric::L2, Metric::InnerProduct] {
        let (ix, query) = glove_demo_wide(metric);
        let (d, l2) = (ix.cb.d, metric == Metric::L2);
        // Every list, and enough results that most ids come back both ways.
        let p = SearchParams {
            k: 200,
            nprobe: 64,
            rerank: 0,
        };
        ix.ctx.set_exact_rotation(true);
        let exact = ix.search(&query, &p, None).unwrap();
        ix.ctx.set_exact_rotation(false);
        let ints = ix.search(&query, &p, None).unwrap();
        let mut light = None;
        let tables = ix.tables(&mut light).unwrap();
        let (mut moved, mut compared) = (0f32, 0);
        for (i, qv) in query.chunks_exact(d).enumerate() {
            let slack = tables.rotation_slack(qv, l2, false);
            assert_eq!(tables.rotation_slack(qv, l2, true), 0.0);
            let of = |r: &SearchResults| -> std::collections::HashMap<u64, f32> {
                let at = i * p.k..(i + 1) * p.k;
                r.ids[at.clone()]
                    .iter()
                    .copied()
                    .zip(r.distances[at].iter().copied())
                    .collect()
            };
            let (a, b) = (of(&exact), of(&ints));
            for (id, x) in &a {
                let Some(y) = b.get(id) else { continue };
                // The float sums' own rounding: a hair of room.
                let tol = slack + 1e-5 * (1.0 + x.abs());
                assert!(
                    (x - y).abs() <= tol,
                    "{metric:?} query {i} id {id}: {x} vs {y}, slack {slack}"
                );
                moved = moved.max((x - y).abs() / slack);
                compared += 1;
            }
        }
        assert!(compared > 100 * query.len() / d);
        assert!(
            moved > 0.0,
            "{metric:?}: the rotations gave the same scores"
        );
    }
}

#[test]
fn queries_rotate_as_padded_queries_do() {
    // 32 sub-spaces of 2 over 50 dimensions: 14 of padding, whose axes the learned
    // rotation keeps, so a query's rotation passes over their rows.
    let (ix, _, query) = glove_demo_4bit();
    let cb = &*ix.cb;
    let (d, dp) = (cb.d, cb.pq.dim());
    assert_eq!((d, dp), (50, 64));
    let mut light = None;
    let tables = ix.tables(&mut light).unwrap();
    let rows = tables.query_rotation_rows(d);
    assert_eq!(rows, d, "the padding's rows are passed over");
    let got = tables.rotated_queries(&cb.view(), &query, false);
    let padded = layout::pad_rows(&query, d, cb.pq.dsub, dp);
    let want = layout::rotate(&cb.rot, &padded, dp);
    for (i, (g, w)) in got.chunks_exact(dp).zip(want.chunks_exact(dp)).enumerate() {
        let n = linalg::dot(w, w).sqrt();
        for (t, (g, w)) in g.iter().zip(w).enumerate() {
            assert!((g - w).abs() <= 1e-5 * n, "query {i} value {t}: {g} vs {w}");
        }
    }
}

#[test]
fn a_rotation_of_zeros_searches_without_failing() {
    // A file's rotation is checked for entries above 1 only: one of zeros loads, and
    // every query then rotates to zeros. The search still answers every query.
    let (ix, base, query) = glove_demo_4bit();
    let mut cb = (*ix.cb).clone();
    cb.rot.fill(0.0);
    let mut zeros = Index::new(ix.ctx.clone(), std::sync::Arc::new(cb)).unwrap();
    let ids: Vec<u64> = (0..ix.len() as u64).collect();
    zeros.add(&base[..], &ids).unwrap();
    let p = SearchParams {
        k: 10,
        nprobe: 4,
        rerank: 0,
    };
    let r = zeros.search(&query, &p, None).unwrap();
    assert!(r.ids.iter().all(|&id| id < ix.len() as u64));
}

#[test]
fn the_block_scan_keeps_what_the_plain_scan_keeps_on_real_data() {
    // GloVe demo vectors in a 4-bit index; each query's real L2 table for each of its
    // lists (the list's terms plus -2 <y_j, c>), through both scans.
    let (ix, _, query) = glove_demo_4bit();
    let cb = &*ix.cb;
    let (dp, nsub, ds, ks) = (cb.pq.dim(), cb.pq.nsub, cb.pq.dsub, cb.pq.ksub());
    let mut light = None;
    let tables = ix.tables(&mut light).unwrap();
    let terms = tables.l2_terms.as_ref().unwrap();
    let qy = tables.rotated_queries(&cb.view(), &query, false);
    let mut table = fastscan::ByteTable::new(nsub);
    for y in qy.chunks_exact(dp).take(40) {
        let mut qci = vec![0f32; nsub * ks];
        tables.query_table(y, ds, ks, -2.0, &mut qci);
        for a in 0..cb.anchors() {
            let (lids, lcodes) = ix.list(a);
            let t = &terms[a * nsub * ks..(a + 1) * nsub * ks];
            let lut: Vec<f32> = t.iter().zip(&qci).map(|(t, q)| t + q).collect();
            let mut want = fastscan::ByteTable::new(nsub);
            want.fill_scalar(&lut);
            table.fill(&lut);
            assert_eq!(table.bytes, want.bytes, "list {a}");
            let packed = ix.packed4().unwrap().list(a);
            let what = format!("list {a}");
            assert_same_scans(1.5, &lut, nsub, lids, lcodes, packed, &mut table, 10, &what);
            for block in packed.chunks_exact(fastscan::block_bytes(nsub)) {
                let (mut s, mut r) = ([0u16; fastscan::BLOCK], [0u16; fastscan::BLOCK]);
                fastscan::block_sums(block, &want.bytes, &mut s);
                fastscan::block_sums_scalar(block, &want.bytes, &mut r);
                assert_eq!(s, r, "list {a}");
            }
        }
    }
}

/// Adds, removes and merges change the 4-bit blocks where they are held: after each, every
/// list's blocks are those a fresh pack of the lists gives, and the searches those of a
/// fresh index of the same contents (ids and distances to the bit).
#[test]
fn blocks_follow_adds_removes_and_merges() {
    let (mut ix, base, query) = glove_demo_4bit();
    let d = ix.cb.dim();
    let n = base.len() / d;
    let p = SearchParams {
        k: 10,
        nprobe: 8,
        rerank: 0,
    };
    let check = |ix: &Index, what: &str| {
        let held = ix.packed4.get().expect("the blocks are held");
        let fresh = Packed::new(ix.nlist(), ix.cb.pq.code_fields(), |j| ix.list(j).1);
        for j in 0..ix.nlist() {
            assert_eq!(held.list(j), fresh.list(j), "{what}: list {j}");
        }
        let again = Index::from_bytes(ix.ctx.clone(), &ix.to_bytes()).unwrap();
        let (a, b) = (ix.search(&query, &p, None), again.search(&query, &p, None));
        assert!(a.unwrap() == b.unwrap(), "{what}: searches differ");
    };
    ix.search(&query, &p, None).unwrap();
    check(&ix, "built");
    // Ids past the demo's, one vector at a time and in a batch, some landing in full blocks.
    ix.add(&base[..d], &[n as u64]).unwrap();
    check(&ix, "one added");
    let more: Vec<u64> = (0..200).map(|i| (n + 1 + i) as u64).collect();
    ix.add(&base[d..201 * d], &more).unwrap();
    check(&ix, "200 added");
    // Removals from the middle and the ends of lists, emptying blocks.
    let gone: Vec<u64> = (0..n as u64).step_by(3).collect();
    assert_eq!(ix.remove(&gone).unwrap(), gone.len());
    check(&ix, "a third removed");
    let other = Index::from_bytes(ix.ctx.clone(), &ix.to_bytes()).unwrap();
    ix.merge_from(&other).unwrap();
    check(&ix, "merged with itself");
}
