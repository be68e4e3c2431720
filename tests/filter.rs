//! Filtered search on the real GloVe demo subset: a filtered search equals the search of an
//! index holding only the allowed vectors, exact re-rank of it matches brute force over the
//! allowed subset, and the three filter forms agree.

mod common;
use vlc_compress::{DenseRaw, Error, Filter, Index, Metric, RawVectors, SearchParams};

/// Whether id `i` is in the `pct` percent selection (a fixed hash, so about pct% of any range).
fn picked(i: u64, pct: u64) -> bool {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % 100 < pct
}

fn forms(allowed: &[u64], n: u64) -> Vec<(&'static str, Filter)> {
    let mut bits = vec![0u8; n.div_ceil(8) as usize];
    for &i in allowed {
        bits[(i / 8) as usize] |= 1 << (i % 8);
    }
    let set: std::collections::HashSet<u64> = allowed.iter().copied().collect();
    vec![
        ("bitset", Filter::bitset(&bits, n).unwrap()),
        ("ids", Filter::ids(allowed).unwrap()),
        // Held as given (`Filter::ids` makes a dense list a bitset).
        (
            "id list",
            Filter::Ids(std::sync::Arc::new(allowed.to_vec())),
        ),
        (
            "predicate",
            Filter::predicate(move |id| Ok(set.contains(&id))),
        ),
    ]
}

/// An index of `base` on `metric` at `bits`, and the same codebook's index of only `allowed`.
fn pair(demo: &common::Demo, metric: Metric, bits: u32, allowed: &[u64]) -> (Index, Index) {
    let mut p = common::small_params(128, 16);
    p.metric = metric;
    p.bits = bits;
    let ix = common::indexed(&common::ctx(2), p, &demo.base);
    let d = demo.base.cols;
    let mut sub = Index::new(ix.context().clone(), ix.codebook().clone()).unwrap();
    let rows: Vec<f32> = allowed
        .iter()
        .flat_map(|&i| demo.base.data[i as usize * d..(i as usize + 1) * d].to_vec())
        .collect();
    sub.add(&rows[..], allowed).unwrap();
    (ix, sub)
}

#[test]
fn filtered_search_equals_the_search_of_the_allowed_subset() {
    let demo = common::demo();
    let (n, d) = (demo.base.rows as u64, demo.base.cols);
    let q = &demo.query.data[..100 * d];
    for (metric, bits) in [(Metric::L2, 8), (Metric::L2, 4), (Metric::InnerProduct, 4)] {
        for pct in [1, 10, 50] {
            let allowed: Vec<u64> = (0..n).filter(|&i| picked(i, pct)).collect();
            let (ix, sub) = pair(&demo, metric, bits, &allowed);
            for nprobe in [4, 32] {
                let p = SearchParams {
                    k: 10,
                    nprobe,
                    rerank: 0,
                };
                let want = sub.search(q, &p, None).unwrap();
                for (name, f) in forms(&allowed, n) {
                    let got = ix.search_filtered(q, &p, None, Some(&f)).unwrap();
                    assert_eq!(
                        got, want,
                        "{metric:?} {bits}-bit {pct}% nprobe {nprobe} {name}"
                    );
                }
                if pct == 1 && nprobe == 4 {
                    // Few allowed in few lists: some queries come back short, padded.
                    let short = (0..100).filter(|&i| want.found(i) < 10).count();
                    assert!(short > 0, "{metric:?} {bits}-bit: no query was short");
                    for i in 0..100 {
                        let f = want.found(i);
                        assert!(want.ids[i * 10 + f..(i + 1) * 10]
                            .iter()
                            .all(|&x| x == u64::MAX));
                        assert!(want.distances[i * 10 + f..(i + 1) * 10]
                            .iter()
                            .all(|x| x.is_nan()));
                    }
                }
            }
        }
    }
}

#[test]
fn filtered_rerank_finds_the_exact_neighbours_among_the_allowed() {
    let demo = common::demo();
    let (n, d) = (demo.base.rows as u64, demo.base.cols);
    let nq = 100;
    let q = &demo.query.data[..nq * d];
    let raw = DenseRaw {
        data: &demo.base.data,
        d,
    };
    for pct in [1, 10, 50] {
        let allowed: Vec<u64> = (0..n).filter(|&i| picked(i, pct)).collect();
        let (ix, _) = pair(&demo, Metric::L2, 8, &allowed);
        // Brute force over the allowed rows, mapped back to their ids.
        let rows: Vec<f32> = allowed
            .iter()
            .flat_map(|&i| demo.base.data[i as usize * d..(i as usize + 1) * d].to_vec())
            .collect();
        let gt: Vec<i32> = common::brute_force(&rows, q, d, 10, |a, b| {
            a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
        })
        .iter()
        .map(|&r| allowed[r as usize] as i32)
        .collect();
        let p = SearchParams {
            k: 10,
            nprobe: 128,
            rerank: 100,
        };
        let f = Filter::ids(&allowed).unwrap();
        let got = ix
            .search_filtered(q, &p, Some(&raw as &dyn RawVectors), Some(&f))
            .unwrap();
        assert!(got.ids.iter().all(|&i| allowed.binary_search(&i).is_ok()));
        let rec = common::recall(&got.ids, 10, &gt, 10, 10);
        assert!(rec >= 0.97, "{pct}%: recall@10 over the allowed = {rec}");
    }
}

#[test]
fn filters_refuse_bad_input_and_pass_errors_on() {
    let demo = common::demo();
    let d = demo.base.cols;
    let (ix, _) = pair(&demo, Metric::L2, 8, &[1, 2, 3]);
    let q = &demo.query.data[..4 * d];
    // Fewer allowed than k, every list probed: exactly those, then missing slots.
    let p = SearchParams {
        k: 10,
        nprobe: 1000,
        rerank: 0,
    };
    let f = Filter::ids(&[1, 2, 3]).unwrap();
    let r = ix.search_filtered(q, &p, None, Some(&f)).unwrap();
    for i in 0..4 {
        assert_eq!(r.found(i), 3);
        let mut hit = r.ids[i * 10..i * 10 + 3].to_vec();
        hit.sort();
        assert_eq!(hit, [1, 2, 3]);
    }
    // A bitset ending before the ids allows none beyond it.
    let f = Filter::bitset(&[0xff], 3).unwrap();
    let r = ix.search_filtered(q, &p, None, Some(&f)).unwrap();
    assert!((0..4).all(|i| r.found(i) == 3));
    assert!(r.ids.iter().all(|&i| i < 3 || i == u64::MAX));
    assert!(matches!(
        Filter::bitset(&[0xff], 9),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Filter::ids(&[3, 2]),
        Err(Error::InvalidArgument(_))
    ));
    // Sparse ids stay a sorted list; dense ones become a bitset; both allow the same.
    let sparse = Filter::ids(&[5, 1 << 40]).unwrap();
    let dense = Filter::ids(&[1, 5, 9]).unwrap();
    assert!(matches!(sparse, Filter::Ids(_)) && matches!(dense, Filter::Bitset { .. }));
    for id in [0, 1, 5, 9, 10, 1 << 40, u64::MAX] {
        assert_eq!(sparse.allows(id).unwrap(), id == 5 || id == 1 << 40);
        assert_eq!(dense.allows(id).unwrap(), [1, 5, 9].contains(&id));
    }
    // A predicate's error ends the search with it.
    let f = Filter::predicate(|id| {
        if id % 2 == 1 {
            Err(Error::Callback(format!("odd id {id}")))
        } else {
            Ok(true)
        }
    });
    assert!(matches!(
        ix.search_filtered(q, &p, None, Some(&f)),
        Err(Error::Callback(_))
    ));
    // A filter that allows everything changes nothing.
    let all = Filter::predicate(|_| Ok(true));
    let p = SearchParams {
        k: 10,
        nprobe: 8,
        rerank: 0,
    };
    assert_eq!(
        ix.search_filtered(q, &p, None, Some(&all)).unwrap(),
        ix.search(q, &p, None).unwrap()
    );
}
