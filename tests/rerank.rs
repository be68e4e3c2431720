//! Re-rank against real ids: a fetch function that looks rows up by key gives exactly what the
//! dense array gives, and its failure fails the search.

mod common;
use std::collections::HashMap;
use vlc_compress::{DenseRaw, Error, FetchRaw, Index, RawVectors, SearchParams};

#[test]
fn a_fetch_function_reranks_by_real_ids() {
    let demo = common::demo();
    let d = demo.base.cols;
    let ctx = common::ctx(2);
    let by_row = common::indexed(&ctx, common::small_params(64, 8), &demo.base);
    // The same vectors under keys far beyond any row number.
    let key = |i: u64| 1_000_000_000_000 + 7 * i;
    let keys: Vec<u64> = (0..demo.base.rows as u64).map(key).collect();
    let mut by_key = Index::new(ctx.clone(), by_row.codebook().clone()).unwrap();
    by_key.add(&demo.base.data[..], &keys).unwrap();
    let rows: HashMap<u64, &[f32]> = keys.iter().copied().zip(demo.base.data.chunks(d)).collect();
    let fetch = FetchRaw {
        d,
        f: |ids: &[u64], out: &mut [f32]| {
            for (id, o) in ids.iter().zip(out.chunks_exact_mut(d)) {
                o.copy_from_slice(
                    rows.get(id)
                        .ok_or_else(|| Error::Callback(format!("no row {id}")))?,
                );
            }
            Ok(())
        },
    };
    let dense = DenseRaw {
        data: &demo.base.data,
        d,
    };
    let p = SearchParams {
        k: 10,
        nprobe: 16,
        rerank: 50,
    };
    let q = &demo.query.data;
    let want = by_row
        .search(q, &p, Some(&dense as &dyn RawVectors))
        .unwrap();
    let got = by_key
        .search(q, &p, Some(&fetch as &dyn RawVectors))
        .unwrap();
    assert_eq!(got.distances, want.distances);
    let mapped: Vec<u64> = want.ids.iter().map(|&i| key(i)).collect();
    assert_eq!(got.ids, mapped);
    let rec = common::recall(&want.ids, 10, &demo.gt.data, demo.gt.cols, 10);
    assert!(rec > 0.85, "recall@10 with re-rank 50: {rec}");
    // A dense array cannot serve real keys; a failing fetch fails the search.
    assert!(matches!(
        by_key.search(q, &p, Some(&dense as &dyn RawVectors)),
        Err(Error::InvalidArgument(_))
    ));
    let broken = FetchRaw {
        d,
        f: |_: &[u64], _: &mut [f32]| Err(Error::Callback("down".into())),
    };
    assert!(matches!(
        by_key.search(q, &p, Some(&broken as &dyn RawVectors)),
        Err(Error::Callback(_))
    ));
    // Range search re-scores through it too.
    let r = by_key
        .range_search(
            &q[..d],
            want.distances[9],
            &p,
            Some(&fetch as &dyn RawVectors),
            None,
        )
        .unwrap();
    assert!(r.hits(0).0.iter().all(|id| rows.contains_key(id)));
    assert!(r.hits(0).1.iter().all(|&v| v <= want.distances[9]));
}
