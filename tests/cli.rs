//! The `vlcc` command end to end: train -> encode (f16 .npy) -> decode -> build -> search
//! (.ivecs and .npy, with re-rank) -> eval --json, and clear failures on bad input.

use std::path::{Path, PathBuf};
use std::process::Command;

fn vlc(args: &[&str], dir: &Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vlcc"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn data(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/glove-demo")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn the_whole_pipeline_runs_from_the_command_line() {
    let dir = std::env::temp_dir().join(format!("vlcc-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = data("base.fvecs");
    let query = vlc_compress::vecio::read_fvecs(Path::new(&data("query.fvecs"))).unwrap();
    let q16: Vec<half::f16> = query.data.iter().map(|&v| half::f16::from_f32(v)).collect();
    vlc_compress::vecio::write_npy(&dir.join("q16.npy"), &q16, query.rows, query.cols, "<f2")
        .unwrap();

    let run = |args: &[&str]| {
        let (ok, out, err) = vlc(args, &dir);
        assert!(ok, "vlc {args:?} failed: {err}");
        out
    };
    let t = run(&[
        "train",
        "--input",
        &base,
        "--out",
        "cb.vlcc",
        "--anchors",
        "64",
        "--bytes",
        "8",
        "--iters",
        "5",
        "--json",
    ]);
    let t: serde_json::Value = serde_json::from_str(t.trim()).unwrap();
    assert_eq!(
        (t["bytes_per_vector"].clone(), t["codec_bytes"].clone()),
        (8.into(), 9.into())
    );
    let e = run(&[
        "encode",
        "--codebook",
        "cb.vlcc",
        "--input",
        "q16.npy",
        "--out",
        "codes.npy",
        "--json",
    ]);
    // One meaning of `bytes_per_vector` in every command: the residual code, as trained.
    let e: serde_json::Value = serde_json::from_str(e.trim()).unwrap();
    assert_eq!(
        (e["bytes_per_vector"].clone(), e["codec_bytes"].clone()),
        (8.into(), 9.into())
    );
    run(&[
        "decode",
        "--codebook",
        "cb.vlcc",
        "--input",
        "codes.npy",
        "--out",
        "dec.fvecs",
    ]);
    let dec = vlc_compress::vecio::read_fvecs(&dir.join("dec.fvecs")).unwrap();
    assert_eq!((dec.rows, dec.cols), (query.rows, query.cols));
    let mse: f32 = dec
        .data
        .iter()
        .zip(&query.data)
        .map(|(a, b)| (a - b) * (a - b))
        .sum::<f32>()
        / dec.rows as f32;
    assert!(
        mse < 10.0,
        "decoded vectors are far from the queries: {mse}"
    );
    run(&[
        "build",
        "--input",
        &base,
        "--codebook",
        "cb.vlcc",
        "--out",
        "ix.vlcc",
        "--json",
    ]);
    // `info`: sizes and memory by part; checksums checked now or deferred to --verify.
    let info = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["info", "ix.vlcc"];
        all.extend_from_slice(args);
        serde_json::from_str(&run(&all)).unwrap()
    };
    let full = info(&[]);
    assert_eq!(full["checksums"], "verified");
    assert!(full["memory_mapped"].as_bool().unwrap());
    assert!(full["code_bytes"].as_u64().unwrap() > 0 && full["table_bytes"] == 0);
    assert_eq!(info(&["--defer-checksums"])["checksums"], "deferred");
    assert_eq!(
        info(&["--defer-checksums", "--verify"])["checksums"],
        "verified"
    );
    run(&[
        "search",
        "--index",
        "ix.vlcc",
        "--query",
        &data("query.fvecs"),
        "--nprobe",
        "8",
        "--out",
        "r.ivecs",
        "--json",
    ]);
    let r = vlc_compress::vecio::read_ivecs(&dir.join("r.ivecs")).unwrap();
    assert_eq!((r.rows, r.cols), (query.rows, 10));
    // numpy's default float64, big-endian here: the same queries, the same answers. Each
    // u64 holds one value's big-endian bytes, which write_npy writes as they are.
    let q64: Vec<u64> = query
        .data
        .iter()
        .map(|&v| u64::from_ne_bytes((v as f64).to_be_bytes()))
        .collect();
    vlc_compress::vecio::write_npy(&dir.join("q64.npy"), &q64, query.rows, query.cols, ">f8")
        .unwrap();
    run(&[
        "search",
        "--index",
        "ix.vlcc",
        "--query",
        "q64.npy",
        "--nprobe",
        "8",
        "--out",
        "r64.ivecs",
    ]);
    let r64 = vlc_compress::vecio::read_ivecs(&dir.join("r64.ivecs")).unwrap();
    assert_eq!(r64, r, "float64 queries answered differently");
    // Range search: rows as long as each query's hits, all within the radius, nearest first.
    let out = run(&[
        "search",
        "--index",
        "ix.vlcc",
        "--query",
        &data("query.fvecs"),
        "--nprobe",
        "8",
        "--radius",
        "20",
        "--out",
        "range.ivecs",
        "--out-distances",
        "range.fvecs",
        "--json",
    ]);
    let ragged = |name: &str| -> Vec<Vec<u32>> {
        let b = std::fs::read(dir.join(name)).unwrap();
        let mut rows = Vec::new();
        let mut at = 0;
        while at < b.len() {
            let n = i32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
            let row = b[at + 4..at + 4 + 4 * n]
                .chunks(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            rows.push(row);
            at += 4 + 4 * n;
        }
        rows
    };
    let (ids, dists) = (ragged("range.ivecs"), ragged("range.fvecs"));
    assert_eq!(ids.len(), query.rows);
    let lens: Vec<usize> = ids.iter().map(Vec::len).collect();
    assert_eq!(lens, dists.iter().map(Vec::len).collect::<Vec<_>>());
    assert!(
        lens.iter().any(|&n| n > 10) && lens.iter().any(|&n| n != lens[0]),
        "{lens:?}"
    );
    for row in &dists {
        let d: Vec<f32> = row.iter().map(|&b| f32::from_bits(b)).collect();
        assert!(d.iter().all(|&v| v <= 20.0) && d.windows(2).all(|w| w[0] <= w[1]));
    }
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["hits"], lens.iter().sum::<usize>());
    let (ok, _, err) = vlc(
        &[
            "search",
            "--index",
            "ix.vlcc",
            "--query",
            &data("query.fvecs"),
            "--radius",
            "20",
            "--out",
            "range.npy",
        ],
        &dir,
    );
    assert!(!ok && err.contains("range.npy"), "{err}");
    // An index with error bounds: the certified re-rank reports what it re-ranked.
    run(&[
        "build",
        "--input",
        &base,
        "--codebook",
        "cb.vlcc",
        "--refine",
        "bound",
        "--out",
        "ixb.vlcc",
    ]);
    let out = run(&[
        "search",
        "--index",
        "ixb.vlcc",
        "--query",
        &data("query.fvecs"),
        "--nprobe",
        "8",
        "--rerank",
        "auto",
        "--rerank-cap",
        "100000",
        "--raw",
        &base,
        "--out",
        "auto.ivecs",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["rerank"], "auto");
    assert!(v["reranked_per_query"].as_f64().unwrap() >= 10.0, "{v}");
    assert_eq!(v["queries_certified"], 500, "{v}");
    let (ok, _, err) = vlc(
        &[
            "search",
            "--index",
            "ix.vlcc",
            "--query",
            &data("query.fvecs"),
            "--rerank",
            "auto",
            "--raw",
            &base,
            "--out",
            "a.ivecs",
        ],
        &dir,
    );
    assert!(!ok && err.contains("error bounds"), "{err}");
    run(&[
        "search", "--index", "ix.vlcc", "--query", "q16.npy", "--rerank", "50", "--raw", &base,
        "--out", "r.npy",
    ]);

    let e = run(&[
        "eval",
        "--base",
        &base,
        "--query",
        &data("query.fvecs"),
        "--gt",
        &data("gt_l2.ivecs"),
        "--anchors",
        "64",
        "--bytes",
        "8",
        "--iters",
        "5",
        "--nprobe",
        "4,16",
        "--exact-rotation",
        "--json",
    ]);
    let rows: Vec<serde_json::Value> = e
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    for key in [
        "backend",
        "n",
        "d",
        "metric",
        "anchors",
        "bytes_per_vector",
        "compression_ratio",
        "train_seconds",
        "encode_seconds",
        "nprobe",
        "rerank",
        "recall_at_1",
        "recall_at_10",
        "qps",
        "threads",
        "energy",
        "max_list_over_mean",
        "h2d_bytes",
        "d2h_bytes",
    ] {
        assert!(rows[0].get(key).is_some(), "eval --json lacks {key}");
    }
    assert!(rows[1]["recall_at_10"].as_f64().unwrap() >= rows[0]["recall_at_10"].as_f64().unwrap());

    // Bad input fails with a message and a non-zero status, never a crash.
    let (ok, _, err) = vlc(
        &[
            "search",
            "--index",
            "missing.vlcc",
            "--query",
            "q16.npy",
            "--out",
            "x.ivecs",
        ],
        &dir,
    );
    assert!(!ok && err.contains("missing.vlcc"));
    let (ok, _, err) = vlc(
        &[
            "train",
            "--input",
            &base,
            "--out",
            "x.vlcc",
            "--anchors",
            "100000",
        ],
        &dir,
    );
    assert!(!ok && err.contains("not enough data"), "{err}");
    std::fs::write(dir.join("junk.vlcc"), b"this is not an index").unwrap();
    let (ok, _, err) = vlc(
        &[
            "search",
            "--index",
            "junk.vlcc",
            "--query",
            "q16.npy",
            "--out",
            "x.ivecs",
        ],
        &dir,
    );
    assert!(!ok && err.contains("corrupt"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bench_times_small_runs_and_refuses_device_input_without_cuda() {
    let dir = std::env::temp_dir();
    let small = [
        "bench",
        "--n",
        "2000",
        "--d",
        "16",
        "--anchors",
        "16",
        "--iters",
        "3",
        "--bytes",
        "4",
        "--queries",
        "50",
        "--repeat",
        "1",
        "--json",
    ];
    let (ok, out, err) = vlc(&small, &dir);
    assert!(ok, "{err}");
    let stages: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<&str> = stages
        .iter()
        .map(|r| r["stage"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["train", "encode", "search"]);
    assert_eq!(stages[1]["input"], "host");
    assert!(stages.iter().all(|r| r["seconds"].as_f64().unwrap() > 0.0));
    assert_eq!(stages[2]["bits"], 8);
    let mut four = small.to_vec();
    four.extend(["--bits", "4", "--stages", "search"]);
    let (ok, out, err) = vlc(&four, &dir);
    assert!(ok, "{err}");
    let row: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!((&row["stage"], &row["bits"]), (&"search".into(), &4.into()));
    let mut add = small.to_vec();
    add.extend(["--bits", "4", "--stages", "add"]);
    let (ok, out, err) = vlc(&add, &dir);
    assert!(ok, "{err}");
    let row: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!((&row["stage"], &row["added"]), (&"add".into(), &20.into()));
    for key in [
        "warm_seconds",
        "after_one_seconds",
        "after_one_percent_seconds",
    ] {
        assert!(row[key].as_f64().unwrap() > 0.0, "{key}: {row}");
    }
    let mut odd = small.to_vec();
    odd.extend(["--bits", "5"]);
    let (ok, _, err) = vlc(&odd, &dir);
    assert!(!ok && err.contains("bits"), "{err}");
    let mut cpu = small.to_vec();
    cpu.extend(["--stages", "encode", "--from-device"]);
    let (ok, _, err) = vlc(&cpu, &dir);
    assert!(
        !ok && err.contains("--from-device needs a CUDA context"),
        "{err}"
    );
}

/// Runs `vlc` and fails the test if it has not ended in 20 s (a read that blocks would hang).
fn vlc_in_time(args: &[&str], dir: &Path) -> (std::process::ExitStatus, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vlcc"))
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t.elapsed() > std::time::Duration::from_secs(20) {
            let _ = c.kill();
            panic!("vlc {args:?} did not end within 20 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = c.wait_with_output().unwrap();
    (out.status, String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn bad_paths_sizes_and_dimensions_fail_up_front_and_cleanly() {
    use std::os::unix::process::ExitStatusExt;
    let dir = std::env::temp_dir().join(format!("vlcc-cli-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = data("base.fvecs");
    let (ok, _, err) = vlc(
        &[
            "build",
            "--input",
            &base,
            "--out",
            "ix.vlcc",
            "--anchors",
            "32",
            "--bytes",
            "8",
            "--iters",
            "3",
        ],
        &dir,
    );
    assert!(ok, "{err}");
    let d = vlc_compress::vecio::read_fvecs(Path::new(&base))
        .unwrap()
        .cols;
    // 20 queries of half the dimension: once answered as 10 rows of the full one.
    let half: Vec<f32> = (0..20 * d / 2).map(|i| i as f32 * 0.01).collect();
    vlc_compress::vecio::write_fvecs(&dir.join("half.fvecs"), &half, d / 2).unwrap();
    let (ok, _, err) = vlc(
        &[
            "search",
            "--index",
            "ix.vlcc",
            "--query",
            "half.fvecs",
            "--out",
            "o.ivecs",
        ],
        &dir,
    );
    let both = [format!("d = {}", d / 2), format!("d = {d}")];
    assert!(!ok && both.iter().all(|s| err.contains(s)), "{err}");
    let (ok, _, err) = vlc(
        &[
            "encode",
            "--codebook",
            "ix.vlcc",
            "--input",
            "half.fvecs",
            "--out",
            "c.npy",
        ],
        &dir,
    );
    assert!(!ok && both.iter().all(|s| err.contains(s)), "{err}");
    // The output's kind is checked before anything runs: the index is not even opened.
    let (ok, _, err) = vlc(
        &[
            "search",
            "--index",
            "missing.vlcc",
            "--query",
            &base,
            "--out",
            "x.txt",
        ],
        &dir,
    );
    assert!(
        !ok && err.contains("--out x.txt") && !err.contains("missing"),
        "{err}"
    );
    // A k of 2^40 is refused with a status, never an abort.
    let (st, err) = vlc_in_time(
        &[
            "search",
            "--index",
            "ix.vlcc",
            "--query",
            &base,
            "--k",
            "1099511627776",
            "--out",
            "o.ivecs",
        ],
        &dir,
    );
    assert!(
        st.code() == Some(1) && st.signal().is_none(),
        "{st:?}: {err}"
    );
    assert!(err.contains("out of memory"), "{err}");
    // A FIFO is neither read (it would block) nor replaced.
    let fifo = dir.join("pipe.vlcc");
    for p in [&fifo, &dir.join("pipe.npy")] {
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }
    for args in [
        &[
            "search",
            "--index",
            "pipe.vlcc",
            "--query",
            &base,
            "--out",
            "o.ivecs",
        ][..],
        &["train", "--input", "pipe.npy", "--out", "cb.vlcc"][..],
        &[
            "build",
            "--input",
            &base,
            "--out",
            "pipe.vlcc",
            "--anchors",
            "32",
            "--iters",
            "2",
        ][..],
    ] {
        let (st, err) = vlc_in_time(args, &dir);
        assert!(
            !st.success() && err.contains("a FIFO, not a regular file"),
            "{args:?}: {err}"
        );
    }
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn search_writes_distances_and_refuses_ids_that_ivecs_cannot_hold() {
    // An index whose ids are real keys (beyond int32), built through the library.
    use vlc_compress::{BackendKind, Compressor, Context, TrainParams};
    let dir = std::env::temp_dir().join(format!("vlcc-cli-ids-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = vlc_compress::vecio::read_fvecs(Path::new(&data("base.fvecs"))).unwrap();
    let ctx = std::sync::Arc::new(Context::new(BackendKind::Cpu, 0, 2).unwrap());
    let mut p = TrainParams {
        bytes_per_vector: 8,
        ..TrainParams::default()
    };
    p.anchor.anchors = 32;
    let mut c = Compressor::new(ctx, p);
    c.train(&base.data, base.cols).unwrap();
    let mut ix = c.new_index().unwrap();
    let n = 2000;
    let ids: Vec<u64> = (0..n as u64).map(|i| 1_000_000_000_000 + i).collect();
    ix.add(&base.data[..n * base.cols], &ids).unwrap();
    ix.save(dir.join("keys.vlcc")).unwrap();
    let q = data("query.fvecs");
    let args = |out: &'static str| {
        [
            "search",
            "--index",
            "keys.vlcc",
            "--query",
            &q,
            "--k",
            "5",
            "--nprobe",
            "8",
            "--out",
            out,
            "--out-distances",
            "d.npy",
        ]
        .map(String::from)
    };
    let run = |a: &[String]| vlc(&a.iter().map(String::as_str).collect::<Vec<_>>(), &dir);
    let (ok, _, err) = run(&args("r.ivecs"));
    assert!(!ok && err.contains("does not fit .ivecs"), "{err}");
    let (ok, _, err) = run(&args("r.npy"));
    assert!(ok, "{err}");
    let d = vlc_compress::vecio::read_vectors(&dir.join("d.npy")).unwrap();
    let query = vlc_compress::vecio::read_fvecs(Path::new(&q)).unwrap();
    assert_eq!((d.rows, d.cols), (query.rows, 5));
    // The library's own ids and squared L2 distances, nearest first.
    let r = std::fs::read(dir.join("r.npy")).unwrap();
    let got: Vec<i64> = bytemuck::pod_collect_to_vec(&r[r.len() - query.rows * 5 * 8..]);
    let want = ix
        .search(
            &query.data,
            &vlc_compress::SearchParams {
                k: 5,
                nprobe: 8,
                rerank: 0,
            },
            None,
        )
        .unwrap();
    assert_eq!(got, want.ids.iter().map(|&i| i as i64).collect::<Vec<_>>());
    assert_eq!(d.data, want.distances);
    assert!(d
        .data
        .chunks(5)
        .all(|row| row.windows(2).all(|w| w[0] <= w[1])));
    let (ok, _, err) = run(&args("r.npy").map(|s| if s == "d.npy" { "d.txt".into() } else { s }));
    assert!(
        !ok && err.contains("--out-distances d.txt: must end in .fvecs or .npy"),
        "{err}"
    );

    // --filter: ids in any order (blank lines skipped), then a bitset that allows none of them.
    let allowed = [1_000_000_000_007u64, 1_000_000_000_003, 1_000_000_000_005];
    let text: String = allowed.iter().map(|i| format!("{i}\n\n")).collect();
    std::fs::write(dir.join("allow.txt"), text).unwrap();
    let filtered = |f: &str| {
        // Every list probed: the three allowed are found wherever they sit.
        let mut a = args("r.npy")
            .map(|s| if s == "8" { "1000".into() } else { s })
            .to_vec();
        a.extend(["--filter".to_string(), f.to_string(), "--json".to_string()]);
        run(&a)
    };
    let (ok, out, err) = filtered("allow.txt");
    assert!(ok, "{err}");
    let r = std::fs::read(dir.join("r.npy")).unwrap();
    let got: Vec<i64> = bytemuck::pod_collect_to_vec(&r[r.len() - query.rows * 5 * 8..]);
    for row in got.chunks(5) {
        let mut hits: Vec<i64> = row[..3].to_vec();
        hits.sort();
        assert_eq!(
            hits,
            [1_000_000_000_003, 1_000_000_000_005, 1_000_000_000_007]
        );
        assert_eq!(row[3..], [-1, -1]);
    }
    let d = vlc_compress::vecio::read_vectors(&dir.join("d.npy")).unwrap();
    assert!(d.data.chunks(5).all(|r| r[3].is_nan() && r[2].is_finite()));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["queries_short_of_k"], query.rows);
    // Where it ran: the CPU, nothing fallen back.
    assert_eq!(v["ran_on"], "cpu");
    assert_eq!(v["fallbacks"], serde_json::json!([]));
    std::fs::write(dir.join("none.bin"), [0xffu8; 4]).unwrap();
    let (ok, _, err) = filtered("none.bin");
    assert!(ok, "{err}");
    let r = std::fs::read(dir.join("r.npy")).unwrap();
    let got: Vec<i64> = bytemuck::pod_collect_to_vec(&r[r.len() - query.rows * 5 * 8..]);
    assert!(got.iter().all(|&i| i == -1));
    std::fs::write(dir.join("bad.txt"), "12\nx7\n").unwrap();
    let (ok, _, err) = filtered("bad.txt");
    assert!(!ok && err.contains("--filter bad.txt: line 2"), "{err}");
    let (ok, _, err) = filtered("allow.csv");
    assert!(!ok && err.contains("--filter allow.csv"), "{err}");
}

#[test]
fn estimate_prints_what_memory_cap_is_checked_against() {
    let dir = std::env::temp_dir().join(format!("vlcc-cli-cap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = data("base.fvecs");
    let n = vlc_compress::vecio::read_fvecs(Path::new(&base))
        .unwrap()
        .rows;
    let (ok, out, err) = vlc(
        &[
            "estimate",
            "--n",
            &n.to_string(),
            "--d",
            "50",
            "--anchors",
            "64",
            "--bytes",
            "8",
            "--json",
        ],
        &dir,
    );
    assert!(ok, "{err}");
    let e: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let train = e["train_host_bytes"].as_u64().unwrap();
    assert!(train > 0 && e["build_host_bytes"].as_u64().unwrap() > n as u64 * 16);
    assert_eq!(e["search_device_bytes"], 0);
    // Far under the training estimate, the build is refused before it allocates, naming why.
    let cap = (train / 50).to_string();
    let build = [
        "build",
        "--input",
        &base,
        "--out",
        "ix.vlcc",
        "--anchors",
        "64",
        "--bytes",
        "8",
        "--memory-cap",
        &cap,
    ];
    let (ok, _, err) = vlc(&build, &dir);
    assert!(!ok && err.contains("memory cap"), "{err}");
    assert!(!dir.join("ix.vlcc").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A FIFO as the filter is refused without blocking, a negative radius is a value (not an
/// unknown flag), and `estimate` refuses what `train` refuses, with train's message.
#[test]
fn filters_radii_and_estimates_take_what_search_and_train_take() {
    let dir = std::env::temp_dir().join(format!("vlcc-cli-r3-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = data("base.fvecs");
    let build = [
        "build",
        "--input",
        &base,
        "--out",
        "ix.vlcc",
        "--anchors",
        "32",
        "--bytes",
        "8",
        "--iters",
        "3",
        "--metric",
        "ip",
    ];
    let (ok, _, err) = vlc(&build, &dir);
    assert!(ok, "{err}");
    let fifo = dir.join("allow.txt");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let search = [
        "search", "--index", "ix.vlcc", "--query", &base, "--out", "o.ivecs",
    ];
    let filtered = [&search[..], &["--filter", "allow.txt"]].concat();
    let (st, err) = vlc_in_time(&filtered, &dir);
    assert!(
        !st.success() && err.contains("a FIFO, not a regular file"),
        "{err}"
    );
    // Similarities of at least -5: a negative radius is a number.
    let ranged = [
        &search[..],
        &["--radius", "-5", "--out-distances", "o.fvecs"],
    ]
    .concat();
    let (ok, _, err) = vlc(&ranged, &dir);
    assert!(ok, "{err}");
    assert!(!vlc_compress::vecio::read_file(&dir.join("o.ivecs"))
        .unwrap()
        .is_empty());
    for bad in [
        &["--anchors", "0"][..],
        &["--bytes", "5000"][..],
        &["--bits", "5"][..],
        &["--metric", "ip", "--error-code", "on"][..],
    ] {
        let train = [&["train", "--input", &base, "--out", "cb.vlcc"][..], bad].concat();
        let (ok, _, train_err) = vlc(&train, &dir);
        assert!(!ok, "train {bad:?} passed");
        let estimate = [&["estimate", "--n", "10000", "--d", "50"][..], bad].concat();
        let (ok, out, err) = vlc(&estimate, &dir);
        assert!(!ok, "estimate {bad:?} passed: {out}");
        let last = |e: &str| e.trim().lines().last().unwrap_or("").to_string();
        assert_eq!(last(&err), last(&train_err), "{bad:?}");
    }
    // An empty .fvecs holds no vectors: no queries to answer, nothing to train on.
    std::fs::write(dir.join("empty.fvecs"), b"").unwrap();
    let none = [
        "search",
        "--index",
        "ix.vlcc",
        "--query",
        "empty.fvecs",
        "--out",
        "e.ivecs",
    ];
    let (ok, _, err) = vlc(&none, &dir);
    assert!(ok, "{err}");
    assert!(vlc_compress::vecio::read_file(&dir.join("e.ivecs"))
        .unwrap()
        .is_empty());
    let (ok, _, err) = vlc(
        &["train", "--input", "empty.fvecs", "--out", "cb.vlcc"],
        &dir,
    );
    assert!(!ok && err.contains("no vectors"), "{err}");
    let (ok, _, err) = vlc(&["estimate", "--n", "1125899906842624", "--d", "128"], &dir);
    assert!(!ok && err.contains("2^56"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Ctrl-C stops a long search (exit 130, no output written) within a fraction of a second;
/// `--timeout-ms` stops one with an error naming the deadline.
#[test]
fn ctrl_c_and_timeouts_stop_a_long_search() {
    use std::os::unix::process::ExitStatusExt;
    let dir = std::env::temp_dir().join(format!("vlcc-cli-int-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = data("base.fvecs");
    let build = [
        "build",
        "--input",
        &base,
        "--out",
        "ix.vlcc",
        "--anchors",
        "32",
        "--bytes",
        "8",
        "--iters",
        "3",
    ];
    let (ok, _, err) = vlc(&build, &dir);
    assert!(ok, "{err}");
    // Forty thousand queries over every list: seconds of search on two cores.
    let x = vlc_compress::vecio::read_fvecs(Path::new(&base)).unwrap();
    let many: Vec<f32> = x.data.repeat(4);
    vlc_compress::vecio::write_vectors(&dir.join("q.fvecs"), &many, x.cols).unwrap();
    let search = [
        "search",
        "--index",
        "ix.vlcc",
        "--query",
        "q.fvecs",
        "--out",
        "o.ivecs",
        "--nprobe",
        "32",
        "--threads",
        "2",
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_vlcc"))
        .args(search)
        .current_dir(&dir)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the search ended too soon to interrupt"
    );
    let sent = std::time::Instant::now();
    // SAFETY: a plain kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let out = child.wait_with_output().unwrap();
    let took = sent.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(130),
        "{:?} {err}",
        out.status.signal()
    );
    assert!(err.contains("interrupted"), "{err}");
    assert!(took < std::time::Duration::from_millis(500), "{took:?}");
    assert!(!dir.join("o.ivecs").exists());
    let timed = [&search[..], &["--timeout-ms", "100"]].concat();
    let (st, err) = vlc_in_time(&timed, &dir);
    assert!(!st.success() && err.contains("deadline"), "{err}");
    assert!(!dir.join("o.ivecs").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
