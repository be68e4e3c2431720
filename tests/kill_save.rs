//! A save killed at a random point never leaves a half-written index under the real name, and
//! the temporary file it leaves is removed by the next save beside it. A child process (this
//! test binary again) saves two indexes over one path in turn until it is SIGKILLed.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vlc_compress::{vecio, Index};

const CHILD: &str = "VLCC_TEST_KILL_SAVE_DIR";
const KILLS: usize = 50;

/// The child: loads a.vlcc and b.vlcc from the directory, says so, then saves them in turn
/// over target.vlcc until it is killed.
fn child(dir: &Path) {
    let a = Index::load(common::ctx(1), dir.join("a.vlcc"), false).unwrap();
    let b = Index::load(common::ctx(1), dir.join("b.vlcc"), false).unwrap();
    println!("ready");
    let target = dir.join("target.vlcc");
    loop {
        a.save(&target).unwrap();
        b.save(&target).unwrap();
    }
}

fn temporaries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".tmp"))
        .collect()
}

#[test]
fn killed_saves_leave_the_old_or_the_new_file() {
    if let Some(dir) = std::env::var_os(CHILD) {
        return child(Path::new(&dir));
    }
    let dir = std::env::temp_dir().join(format!("vlcc-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Two indexes of about 8 MB on one codebook, so that a save takes a while.
    let (n, d) = (250_000, 16);
    let x = common::clustered(n, d, 16, 3);
    let train = vecio::Matrix {
        rows: 4000,
        cols: d,
        data: x[..4000 * d].to_vec(),
    };
    let ctx = common::ctx(0);
    let mut a = common::indexed(&ctx, common::small_params(32, 16), &train);
    let mut b = vlc_compress::Index::new(common::ctx(1), a.codebook().clone()).unwrap();
    let ids: Vec<u64> = (0..n as u64).collect();
    a.add(&x[..], &ids).unwrap();
    b.add(&x[..n / 2 * d], &ids[..n / 2]).unwrap();
    a.save(dir.join("a.vlcc")).unwrap();
    b.save(dir.join("b.vlcc")).unwrap();
    let (abytes, bbytes) = (
        std::fs::read(dir.join("a.vlcc")).unwrap(),
        std::fs::read(dir.join("b.vlcc")).unwrap(),
    );
    let target = dir.join("target.vlcc");
    std::fs::copy(dir.join("a.vlcc"), &target).unwrap();
    let t = Instant::now();
    a.save(&target).unwrap();
    let save = t.elapsed();

    // Kill points spread over two saves' time after the child is ready, from a fixed seed.
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut mid_save = 0;
    let (mut saw_a, mut saw_b) = (0, 0);
    for _ in 0..KILLS {
        let mut c = Command::new(std::env::current_exe().unwrap())
            .args([
                "killed_saves_leave_the_old_or_the_new_file",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, &dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The test harness prints its own lines first.
        let mut out = BufReader::new(c.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("ready") {
            line.clear();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "the child ended first"
            );
        }
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let wait = save.mul_f64(2.0 * (rng % 1000) as f64 / 1000.0);
        std::thread::sleep(wait.max(Duration::from_micros(100)));
        c.kill().unwrap();
        c.wait().unwrap();
        mid_save += usize::from(!temporaries(&dir).is_empty());
        let now = std::fs::read(&target).unwrap();
        if now == abytes {
            saw_a += 1;
        } else if now == bbytes {
            saw_b += 1;
        } else {
            panic!("the target holds neither index ({} bytes)", now.len());
        }
        Index::load(common::ctx(1), &target, true).unwrap();
    }
    eprintln!(
        "{KILLS} kills, save {save:?}: {mid_save} left a temporary file, target held a {saw_a}x, b {saw_b}x"
    );
    assert!(
        mid_save > 0,
        "no kill landed inside a save: the test tested nothing"
    );
    // The next save removes every temporary of the killed processes.
    b.save(&target).unwrap();
    assert!(temporaries(&dir).is_empty(), "{:?}", temporaries(&dir));
    let _ = std::fs::remove_dir_all(&dir);
}
