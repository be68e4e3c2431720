//! Access by id (contains, reconstruct, codes) and removal through the id map, kept consistent
//! through add, remove, merge, save, memory-mapped load and deserialize.

mod common;
use std::collections::HashMap;
use vlc_compress::{Error, Index};

/// Every id the index holds, with the decoded vectors held under it (reconstruct_all's view,
/// which reads the lists directly, not the map).
fn truth(ix: &Index) -> HashMap<u64, Vec<Vec<f32>>> {
    let d = ix.codebook().dim();
    let (ids, v) = ix.reconstruct_all().unwrap();
    let mut m: HashMap<u64, Vec<Vec<f32>>> = HashMap::new();
    for (i, row) in ids.iter().zip(v.chunks_exact(d)) {
        m.entry(*i).or_default().push(row.to_vec());
    }
    m
}

/// The map's answers equal the lists' for ids `0..upto` (held or not).
fn consistent(ix: &Index, upto: u64, what: &str) {
    let t = truth(ix);
    let d = ix.codebook().dim();
    let cs = ix.codebook().codec_size();
    let held: Vec<u64> = (0..upto).filter(|i| t.contains_key(i)).collect();
    for i in 0..upto {
        assert_eq!(
            ix.contains(i).unwrap(),
            t.contains_key(&i),
            "{what}: contains({i})"
        );
    }
    let got = ix.reconstruct(&held).unwrap();
    let codes = ix.get_codes(&held).unwrap();
    assert_eq!(codes.len(), held.len() * cs);
    // The codes decode to the reconstruction, which is one of the vectors held under the id.
    assert_eq!(ix.codebook().decode(&codes).unwrap(), got, "{what}");
    for (i, row) in held.iter().zip(got.chunks_exact(d)) {
        assert!(t[i].iter().any(|v| v == row), "{what}: reconstruct({i})");
    }
    let n: usize = t.values().map(|v| v.len()).sum();
    assert_eq!(ix.len(), n, "{what}");
}

#[test]
fn the_id_map_follows_every_change() {
    let demo = common::demo();
    let d = demo.base.cols;
    let mut ix = common::indexed(&common::ctx(2), common::small_params(64, 8), &demo.base);
    let n = ix.len() as u64;
    consistent(&ix, n + 10, "built");
    // A second vector under id 5 and id 6: both held, removal takes both.
    ix.add(&demo.base.data[..2 * d], &[5, 6]).unwrap();
    consistent(&ix, n + 10, "duplicates");
    assert_eq!(ix.reconstruct(&[5]).unwrap().len(), d);
    let gone: Vec<u64> = (0..n).filter(|i| i % 3 == 0).chain([6, 6, n + 5]).collect();
    let removed = ix.remove(&gone).unwrap();
    assert_eq!(
        removed as u64,
        n.div_ceil(3) + 1,
        "every third, and the second 6"
    );
    consistent(&ix, n + 10, "removed");
    assert!(!ix.contains(6).unwrap() && ix.contains(5).unwrap());
    // Removing again removes nothing.
    assert_eq!(ix.remove(&gone).unwrap(), 0);
    // Merge back the removed ones under new ids.
    let mut other = Index::new(ix.context().clone(), ix.codebook().clone()).unwrap();
    let back: Vec<u64> = (0..300).map(|i| n + 100 + i).collect();
    other.add(&demo.base.data[..300 * d], &back).unwrap();
    ix.merge_from(&other).unwrap();
    consistent(&ix, n + 400, "merged");
    // Save, then load (memory-mapped and not) and deserialize: the same answers.
    let dir = std::env::temp_dir().join(format!("vlcc-byid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ix.vlcc");
    ix.save(&path).unwrap();
    for mmap in [true, false] {
        let mut l = Index::load(ix.context().clone(), &path, mmap).unwrap();
        consistent(&l, n + 400, "loaded");
        // Changes after a load keep the map too (the mapped lists are copied first).
        assert_eq!(l.remove(&[1, 2, n + 100]).unwrap(), 3);
        consistent(&l, n + 400, "loaded, then removed");
        l.add(&demo.base.data[..d], &[1]).unwrap();
        consistent(&l, n + 400, "loaded, removed, added");
    }
    let b = Index::from_bytes(ix.context().clone(), &ix.to_bytes()).unwrap();
    consistent(&b, n + 400, "deserialized");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn by_id_calls_name_what_is_missing() {
    let demo = common::demo();
    let d = demo.base.cols;
    let ctx = common::ctx(1);
    let ix = common::indexed(&ctx, common::small_params(16, 8), &demo.base);
    let n = ix.len() as u64;
    for r in [
        ix.reconstruct(&[0, n + 7]).map(|_| ()),
        ix.get_codes(&[n + 7]).map(|_| ()),
    ] {
        match r {
            Err(Error::InvalidArgument(m)) => assert!(m.contains(&format!("{}", n + 7)), "{m}"),
            other => panic!("{other:?}"),
        }
    }
    assert!(ix.reconstruct(&[]).unwrap().is_empty());
    // An index with no vectors holds no id.
    let empty = Index::new(ctx, ix.codebook().clone()).unwrap();
    assert!(!empty.contains(0).unwrap());
    assert_eq!(ix.reconstruct(&[3]).unwrap().len(), d);
}
