//! Hostile and careless files and paths: crafted shapes, values that pass checksums, reserved
//! bytes, FIFOs, devices, links, modes. Each load path answers with a clear error (never an
//! abort, a panic or a hang), and saves never replace what is not a regular file.

mod common;

use common::craft::{self, Shape, CODEBOOK, INDEX};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;
use vlc_compress::{format, vecio, Error, Index, SearchParams};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vlcc-files-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A small trained index (L2, 16 anchors, 8-byte codes) holding 2,000 clustered vectors.
fn small() -> Index {
    let ctx = common::ctx(0);
    let x = common::clustered(2000, 16, 8, 7);
    let base = vecio::Matrix {
        rows: 2000,
        cols: 16,
        data: x,
    };
    common::indexed(&ctx, common::small_params(16, 8), &base)
}

/// Every way bytes become an index or a codebook, each given `bytes`.
fn every_load(bytes: &[u8], dir: &Path) -> Vec<(&'static str, vlc_compress::Result<()>)> {
    let path = dir.join("f.vlcc");
    std::fs::write(&path, bytes).unwrap();
    vec![
        (
            "load_index mmap",
            Index::load(common::ctx(1), &path, true).map(drop),
        ),
        (
            "load_index copy",
            Index::load(common::ctx(1), &path, false).map(drop),
        ),
        (
            "read_index_bytes",
            Index::from_bytes(common::ctx(1), bytes).map(drop),
        ),
        ("load_codebook", format::load_codebook(&path).map(drop)),
        (
            "read_codebook_bytes",
            format::read_codebook_bytes(bytes).map(drop),
        ),
    ]
}

fn all_corrupt(bytes: &[u8], dir: &Path, says: &str) {
    for (how, r) in every_load(bytes, dir) {
        match r {
            Err(Error::Corrupt(m)) => assert!(m.contains(says), "{how}: {m:?} lacks {says:?}"),
            r => panic!("{how}: expected Corrupt ({says}), got {r:?}"),
        }
    }
}

/// d = 1 with 4-bit codes over many lists: the shape of the 16 MB file that asked for 275 GB.
fn wide(nsub: u32, nlist: u32) -> Shape {
    Shape {
        d: 1,
        metric: 0,
        nlist,
        nsub,
        bits: 4,
        dsub: 1,
        rotation: 0,
        anchors: (0..nlist).map(|i| i as f32 * 1e-3).collect(),
        rot: Vec::new(),
        centroids: (0..nsub * 16).map(|i| (i % 16) as f32 * 0.1).collect(),
    }
}

#[test]
fn shapes_training_cannot_make_are_corrupt() {
    let dir = tmp("shapes");
    // 65,536 sub-quantizers: no bytes_per_vector gives that many.
    all_corrupt(&wide(65_536, 1 << 20).file(INDEX), &dir, "sub-quantizers");
    // Sub-space width 4 for d = 10 and M = 4 (training makes ceil(10/4) = 3).
    let s = Shape {
        d: 10,
        metric: 0,
        nlist: 2,
        nsub: 4,
        bits: 8,
        dsub: 4,
        rotation: 0,
        anchors: vec![0.5; 20],
        rot: Vec::new(),
        centroids: (0..4 * 256 * 4).map(|i| (i % 97) as f32).collect(),
    };
    all_corrupt(&s.file(INDEX), &dir, "sub-space width 4");
    // Odd 4-bit sub-quantizer counts are not whole bytes.
    let mut odd = wide(3, 4);
    odd.centroids.truncate(3 * 16);
    all_corrupt(&odd.file(INDEX), &dir, "sub-quantizers");
}

#[test]
fn a_legal_but_huge_shape_loads_in_bounded_memory_and_searches() {
    // 2^20 lists of d = 1 with 8,192 4-bit sub-quantizers: a shape training can make, whose
    // rotated anchors alone would take 32 GB. The tables that large are built per probed list.
    let dir = tmp("huge");
    let s = wide(8192, 1 << 20);
    let bytes = s.file(INDEX);
    for mmap in [true, false] {
        let path = dir.join("wide.vlcc");
        std::fs::write(&path, &bytes).unwrap();
        let ix = Index::load(common::ctx(1), &path, mmap).unwrap();
        let p = SearchParams {
            k: 3,
            nprobe: 2,
            rerank: 0,
        };
        let r = ix.search(&[0.25], &p, None).unwrap();
        assert!(
            r.ids.iter().all(|&i| i == u64::MAX),
            "an empty index finds nothing"
        );
    }
    let ix = Index::from_bytes(common::ctx(1), &bytes).unwrap();
    assert_eq!(ix.nlist(), 1 << 20);
}

/// A valid index file of `small()`, to edit.
fn valid() -> Vec<u8> {
    small().to_bytes()
}

fn put_f32(b: &mut [u8], at: usize, v: f32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn values_the_checksums_hold_are_still_checked() {
    let dir = tmp("values");
    let (anchors, _) = craft::section(&valid(), 2);
    let (pq, _) = craft::section(&valid(), 4);
    for (at, v, says) in [
        (anchors, f32::NAN, "NaN"),
        (pq + 8, f32::INFINITY, "inf"),
        (anchors + 4, 1e30, "squared norm"),
    ] {
        let mut b = valid();
        put_f32(&mut b, at, v);
        craft::reseal(&mut b);
        all_corrupt(&b, &dir, says);
    }
    // An id equal to the no-result marker.
    let mut b = valid();
    let (ids, _) = craft::section(&b, 6);
    b[ids + 80..ids + 88].copy_from_slice(&u64::MAX.to_le_bytes());
    craft::reseal(&mut b);
    let p = dir.join("ids.vlcc");
    std::fs::write(&p, &b).unwrap();
    for r in [
        Index::load(common::ctx(1), &p, true).map(drop),
        Index::load(common::ctx(1), &p, false).map(drop),
        Index::from_bytes(common::ctx(1), &b).map(drop),
    ] {
        assert!(
            matches!(&r, Err(Error::Corrupt(m)) if m.contains("UINT64_MAX")),
            "{r:?}"
        );
    }
}

#[test]
fn reserved_fields_padding_and_layout_are_strict() {
    let dir = tmp("strict");
    let base = valid();
    let (meta, _) = craft::section(&base, 1);
    type Edit = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(&str, Edit)> = vec![
        ("reserved header", Box::new(|b| b[20] = 1)),
        ("reserved header", Box::new(|b| b[50] = 1)),
        ("reserved field", Box::new(|b| b[64 + 4] = 1)),
        // The refinement field: rows declared, none there.
        ("refinement rows", Box::new(move |b| b[meta + 28] = 1)),
        (
            "unknown refinement kind",
            Box::new(move |b| b[meta + 28] = 9),
        ),
        // META is 48 bytes: 16 bytes of padding follow it.
        ("padding", Box::new(move |b| b[meta + 50] = 1)),
        // Section 2 moved onto section 1.
        (
            "overlap",
            Box::new(move |b| {
                b[64 + 32 + 8..64 + 32 + 16].copy_from_slice(&(meta as u64).to_le_bytes())
            }),
        ),
        ("unknown section id", Box::new(|b| b[64 + 32] = 99)),
        // The second and third entries' ids swapped.
        (
            "in id order",
            Box::new(|b| {
                let (x, y) = (b[64 + 32], b[64 + 64]);
                b[64 + 32] = y;
                b[64 + 64] = x;
            }),
        ),
        ("unknown file kind", Box::new(|b| b[12] = 3)),
        // 64 more zero bytes than the sections need, the header's length updated.
        (
            "sections end",
            Box::new(|b| {
                b.extend_from_slice(&[0u8; 64]);
                let n = b.len() as u64;
                b[24..32].copy_from_slice(&n.to_le_bytes());
            }),
        ),
    ];
    for (says, edit) in cases {
        let mut b = base.clone();
        edit(&mut b);
        craft::reseal(&mut b);
        all_corrupt(&b, &dir, says);
    }
    // An index's list sections in a file of the codebook kind.
    let mut b = base.clone();
    b[12] = CODEBOOK as u8;
    craft::reseal(&mut b);
    all_corrupt(&b, &dir, "does not belong in a codebook");
}

/// Runs `f` on another thread and fails the test if it has not answered in 10 s (a load that
/// blocks would otherwise hang the suite).
fn answers<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what} did not return within 10 s"))
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

fn is_fifo(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(p).unwrap().file_type().is_fifo()
}

#[test]
fn loads_refuse_fifos_and_directories_without_blocking() {
    let dir = tmp("fifo");
    let fifo = dir.join("pipe.vlcc");
    mkfifo(&fifo);
    for (what, target) in [("a FIFO", fifo.clone()), ("a directory", dir.clone())] {
        let t = target.clone();
        let rs: Vec<vlc_compress::Result<()>> = answers("loading", move || {
            vec![
                Index::load(common::ctx(1), &t, true).map(drop),
                Index::load(common::ctx(1), &t, false).map(drop),
                format::load_codebook(&t).map(drop),
            ]
        });
        for r in &rs {
            assert!(
                matches!(r, Err(Error::InvalidArgument(m)) if m.contains(what) && m.contains("not a regular file")),
                "{r:?}"
            );
        }
    }
    let npy = dir.join("pipe.npy");
    mkfifo(&npy);
    let r = answers("reading vectors", move || {
        vecio::read_vectors(&npy).map(drop)
    });
    assert!(
        matches!(&r, Err(Error::InvalidArgument(m)) if m.contains("a FIFO")),
        "{r:?}"
    );
}

#[test]
fn saves_never_replace_what_is_not_a_regular_file() {
    let dir = tmp("targets");
    let ix = small();
    let fifo = dir.join("pipe");
    mkfifo(&fifo);
    let r = answers("saving", {
        let (ix, fifo) = (ix.to_bytes(), fifo.clone());
        move || {
            let ix = Index::from_bytes(common::ctx(1), &ix).unwrap();
            ix.save(&fifo)
        }
    });
    assert!(
        matches!(&r, Err(Error::InvalidArgument(m)) if m.contains("a FIFO")),
        "{r:?}"
    );
    assert!(is_fifo(&fifo), "the FIFO is still a FIFO");
    let r = format::save_codebook(ix.codebook(), &dir);
    assert!(
        matches!(&r, Err(Error::InvalidArgument(m)) if m.contains("a directory")),
        "{r:?}"
    );
    // A character device, made where root may make one (the way /dev/null is one).
    let null = dir.join("null");
    let c = std::ffi::CString::new(null.to_str().unwrap()).unwrap();
    // SAFETY: a valid path; makedev(1, 3) is the null device.
    if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) } == 0 {
        let r = ix.save(&null);
        assert!(
            matches!(&r, Err(Error::InvalidArgument(m)) if m.contains("a character device")),
            "{r:?}"
        );
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::symlink_metadata(&null)
            .unwrap()
            .file_type()
            .is_char_device());
    }
    // A link to a FIFO is refused too.
    let link = dir.join("to-pipe");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    assert!(ix.save(&link).is_err());
    assert!(is_fifo(&fifo));
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
}

/// Temporary files of saves left in `dir`.
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

#[test]
fn saves_follow_links_and_keep_the_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tmp("links");
    let ix = small();
    let real = dir.join("real.vlcc");
    ix.save(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link = dir.join("link.vlcc");
    std::os::unix::fs::symlink("real.vlcc", &link).unwrap();
    let cb_only = format::codebook_bytes(ix.codebook());
    format::save_codebook(ix.codebook(), &link).unwrap();
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        std::fs::read(&real).unwrap(),
        cb_only,
        "the link's target was updated"
    );
    let mode = std::fs::metadata(&real).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o600, "the replaced file's mode is kept");
    // A dangling link: its target is created.
    let dangling = dir.join("dangling.vlcc");
    std::os::unix::fs::symlink("made.vlcc", &dangling).unwrap();
    format::save_codebook(ix.codebook(), &dangling).unwrap();
    assert_eq!(std::fs::read(dir.join("made.vlcc")).unwrap(), cb_only);
    // A new file follows the umask.
    // SAFETY: umask only swaps the process's mask; it is put back at once.
    let mask = unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m
    };
    let fresh = dir.join("fresh.vlcc");
    ix.save(&fresh).unwrap();
    let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666 & !(mask as u32), "umask {mask:o}");
    assert!(leftovers(&dir).is_empty());
}

#[test]
fn stale_temporaries_of_dead_processes_go_at_the_next_save() {
    let dir = tmp("stale");
    let ix = small();
    // A process that has ended (and been reaped) and one that runs (pid 1).
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let stale = dir.join(format!(".ix.vlcc.vlcc-{dead}-0.tmp"));
    let live = dir.join(".ix.vlcc.vlcc-1-0.tmp");
    let other = dir.join(format!(".other.vlcc.vlcc-{dead}-0.tmp"));
    for p in [&stale, &live, &other] {
        std::fs::write(p, b"partial").unwrap();
    }
    ix.save(dir.join("ix.vlcc")).unwrap();
    assert!(!stale.exists(), "a dead process's temporary is removed");
    assert!(live.exists(), "a running process's temporary stays");
    assert!(
        other.exists(),
        "another target's temporaries are left to its own saves"
    );
}
