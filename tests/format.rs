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

/// A mapped index and the same index read into memory take the same changes and stay equal,
/// while the mapped one holds in memory only the lists the changes touched.
fn changes_copy_only_the_lists_they_touch(path: &std::path::Path, x: &[f32], d: usize) {
    let mut m = Index::load(common::ctx(1), path, true).unwrap();
    let mut o = Index::load(common::ctx(1), path, false).unwrap();
    let nlist = m.nlist();
    assert_eq!(
        (m.stats().lists_in_memory, o.stats().lists_in_memory),
        (0, nlist)
    );
    assert_eq!(m.remove(&[1, 4]).unwrap(), 2);
    assert_eq!(o.remove(&[1, 4]).unwrap(), 2);
    let s = m.stats();
    assert!(
        s.memory_mapped && (1..=2).contains(&s.lists_in_memory),
        "{s:?}"
    );
    let extra: Vec<u64> = (9000..9003).collect();
    m.add(&x[..3 * d], &extra).unwrap();
    o.add(&x[..3 * d], &extra).unwrap();
    assert!(m.stats().lists_in_memory <= 5);
    assert!(m.contains(9001).unwrap() && !m.contains(4).unwrap());
    let other = Index::load(common::ctx(1), path, false).unwrap();
    m.merge_from(&other).unwrap();
    o.merge_from(&other).unwrap();
    assert_eq!(m.to_bytes(), o.to_bytes());
    // Saving over the file it maps leaves the map readable and the new file whole.
    m.save(path).unwrap();
    assert_eq!(std::fs::read(path).unwrap(), o.to_bytes());
    assert_eq!(m.to_bytes(), o.to_bytes());
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
    changes_copy_only_the_lists_they_touch(&path, &x, d);
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

/// Where section `id` lies in a file's bytes (the section table follows the 64-byte header).
fn section(bytes: &[u8], id: u32) -> std::ops::Range<usize> {
    let count = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    let at = |e: &[u8], o: usize| u64::from_le_bytes(e[o..o + 8].try_into().unwrap()) as usize;
    let e = bytes[64..64 + count * 32]
        .chunks_exact(32)
        .find(|e| u32::from_le_bytes(e[..4].try_into().unwrap()) == id)
        .unwrap();
    at(e, 8)..at(e, 8) + at(e, 16)
}

/// A deferred load checks structure, header, table and codebook but leaves the codes'
/// checksum to `verify`; a full load refuses the same file.
#[test]
fn deferred_loads_leave_the_codes_checksum_to_verify() {
    let (ix, x, d) = small_index();
    let dir = tempdir();
    let path = dir.join("ix.vlcc");
    ix.save(&path).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let ctx = common::ctx(1);
    // Intact: the deferred load searches like the full one and verifies.
    let deferred = Index::load_deferred(ctx.clone(), &path).unwrap();
    deferred.verify().unwrap();
    let p = SearchParams {
        k: 5,
        nprobe: 4,
        rerank: 0,
    };
    let q = &x[..10 * d];
    assert_eq!(
        deferred.search(q, &p, None).unwrap().ids,
        ix.search(q, &p, None).unwrap().ids
    );
    assert!(deferred.stats().memory_mapped);
    // A flipped code byte: the deferred load takes it, verify and the full load do not.
    let codes = section(&bytes, 7);
    bytes[codes.start + codes.len() / 2] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let damaged = Index::load_deferred(ctx.clone(), &path).unwrap();
    assert!(matches!(damaged.verify(), Err(Error::Corrupt(m)) if m.contains("section 7")));
    damaged.search(q, &p, None).unwrap();
    assert!(matches!(
        Index::load(ctx.clone(), &path, true),
        Err(Error::Corrupt(_))
    ));
    // The codebook's sections are always checked.
    let mut bad_pq = std::fs::read(&path).unwrap();
    bad_pq[codes.start + codes.len() / 2] ^= 0x10;
    let pq = section(&bad_pq, 4);
    bad_pq[pq.start + 5] ^= 0x01;
    std::fs::write(&path, &bad_pq).unwrap();
    assert!(matches!(
        Index::load_deferred(ctx.clone(), &path),
        Err(Error::Corrupt(_))
    ));
    // An index held in memory has nothing to verify.
    ix.verify().unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

/// Memory by part: the search tables and fast-scan blocks come with the first search, the
/// id map with the first access by id; an empty index holds none of them.
#[test]
fn an_index_reports_its_memory_by_part_and_builds_tables_on_first_search() {
    let (ix, x, d) = small_index();
    let empty = Index::new(ix.context().clone(), ix.codebook().clone()).unwrap();
    let s = empty.stats();
    assert_eq!((s.table_bytes, s.id_map_bytes, s.payload_bytes), (0, 0, 0));
    let s = ix.stats();
    assert_eq!(s.table_bytes, 0, "tables before any search");
    assert_eq!(s.code_bytes, 2000 * ix.codebook().residual_code_size());
    assert_eq!((s.id_bytes, s.refine_bytes), (2000 * 8, 0));
    assert_eq!(s.payload_bytes, s.code_bytes + s.id_bytes + s.refine_bytes);
    let p = SearchParams {
        k: 5,
        nprobe: 4,
        rerank: 0,
    };
    ix.search(&x[..d], &p, None).unwrap();
    assert!(ix.stats().table_bytes > 0);
    assert_eq!(ix.stats().id_map_bytes, 0);
    assert!(ix.contains(1).unwrap());
    assert!(ix.stats().id_map_bytes >= 2000 * 16);
}
