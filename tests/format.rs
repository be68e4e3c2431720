//! Files: round trips, memory-mapped use, atomic saves, corruption and truncation.

mod common;
use vlc_compress::{format, Compressor, Error, Index, SearchParams};

fn small_index() -> (Index, Vec<f32>, usize) {
    let d = 12;
    let x = common::clustered(2000, d, 16, 9);
    let ctx = common::ctx(2);
    let mut p = common::small_params(16, 6);
    p.rotation = vlc_compress::Rotation::Random;
    let mut c = Compressor::new(ctx.clone(), p);
    c.train(&x, d).unwrap();
    let mut ix = c.new_index().unwrap();
    let ids: Vec<u64> = (0..2000u64).map(|i| i * 3 + 1).collect();
    ix.add(&x[..], &ids).unwrap();
    (ix, x, d)
}

#[test]
fn index_round_trips_through_files_and_memory_maps() {
    let (ix, x, d) = small_index();
    let dir = tempdir();
    let path = dir.join("a.vlcc");
    ix.save(&path).unwrap();
    let p = SearchParams {
        k: 5,
        nprobe: 4,
        rerank: 0,
    };
    let want = ix.search(&x[..50 * d], &p, None).unwrap();
    for mmap in [true, false] {
        let back = Index::load(common::ctx(1), &path, mmap).unwrap();
        assert_eq!(back.stats().memory_mapped, mmap);
        assert_eq!(back.len(), ix.len());
        assert_eq!(back.codebook().fingerprint(), ix.codebook().fingerprint());
        assert_eq!(back.search(&x[..50 * d], &p, None).unwrap(), want);
        assert_eq!(back.to_bytes(), std::fs::read(&path).unwrap());
    }
    // A mapped index becomes writable on first change.
    let mut m = Index::load(common::ctx(1), &path, true).unwrap();
    assert_eq!(m.remove(&[1, 4]).unwrap(), 2);
    assert!(!m.stats().memory_mapped);
    // Codebook alone, from its own file or from the index file.
    let cbp = dir.join("cb.vlcc");
    format::save_codebook(ix.codebook(), &cbp).unwrap();
    assert_eq!(&format::load_codebook(&cbp).unwrap(), &**ix.codebook());
    assert_eq!(&format::load_codebook(&path).unwrap(), &**ix.codebook());
    assert!(
        matches!(
            Index::load(common::ctx(1), &cbp, true),
            Err(Error::Corrupt(_))
        ),
        "a codebook is not an index"
    );
    // Only the final file is left behind: no temporaries.
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn every_flipped_byte_and_truncation_is_an_error_not_a_panic() {
    let (ix, _, _) = small_index();
    let bytes = ix.to_bytes();
    // Every header/table byte, then a stride through the sections.
    let positions: Vec<usize> = (0..256.min(bytes.len()))
        .chain((256..bytes.len()).step_by(97))
        .collect();
    for &i in &positions {
        let mut b = bytes.clone();
        b[i] ^= 0x5a;
        match Index::from_bytes(common::ctx(1), &b) {
            Err(Error::Corrupt(_)) | Err(Error::UnsupportedVersion { .. }) => {}
            // Padding between sections is not covered by checksums: a flip there is harmless.
            Ok(back) => assert_eq!(back.to_bytes(), bytes, "flip at {i} changed the content"),
            Err(e) => panic!("flip at {i}: unexpected {e}"),
        }
        // The codebook reader sees the same bytes: any answer but a panic is fine.
        let _ = format::read_codebook_bytes(&b);
    }
    for len in (0..bytes.len()).step_by(61).chain([bytes.len() - 1]) {
        assert!(
            Index::from_bytes(common::ctx(1), &bytes[..len]).is_err(),
            "truncated to {len}"
        );
    }
    let mut v = bytes.clone();
    v[8] = 99;
    // Re-seal the header so only the version is wrong.
    let sum = xxhash_rust::xxh3::xxh3_64(&v[..56]);
    v[56..64].copy_from_slice(&sum.to_le_bytes());
    assert!(matches!(
        Index::from_bytes(common::ctx(1), &v),
        Err(Error::UnsupportedVersion { found: 99, .. })
    ));
    assert!(matches!(
        Index::from_bytes(
            common::ctx(1),
            b"not a file at all, just some text padding it out to 64 bytes...."
        ),
        Err(Error::Corrupt(_))
    ));
}

#[test]
fn failed_save_leaves_the_old_file_intact() {
    let (ix, _, _) = small_index();
    let dir = tempdir();
    let path = dir.join("keep.vlcc");
    ix.save(&path).unwrap();
    let before = std::fs::read(&path).unwrap();
    // Saving into a missing directory fails cleanly.
    assert!(matches!(
        ix.save(dir.join("missing/x.vlcc")),
        Err(Error::Io { .. })
    ));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert!(matches!(
        Index::load(common::ctx(1), dir.join("nope.vlcc"), true),
        Err(Error::Io { .. })
    ));
    std::fs::remove_dir_all(dir).unwrap();
}

fn tempdir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "vlcc-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}
