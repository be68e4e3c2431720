//! Builds tests/c/*.c against the cdylib cargo just built and runs it: once with
//! -std=c11 -Wall -Wextra -Wpedantic -Werror, once more under ASan/UBSan/LSan.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Directory holding libvlc_compress.so for this test binary's profile.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    for dir in [deps.clone(), deps.parent().unwrap().to_path_buf()] {
        if dir.join("libvlc_compress.so").exists() {
            return dir;
        }
    }
    panic!("libvlc_compress.so not found next to {}", exe.display());
}

fn build_and_run(name: &str, extra: &[&str], env: &[(&str, &str)]) {
    let out = std::env::temp_dir().join(format!("vlcc-c-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let exe = out.join("harness");
    let lib = lib_dir();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Wpedantic",
            "-Werror",
            "-g",
            "-O1",
        ])
        .args(extra)
        .arg("-I")
        .arg(root().join("include"))
        .arg(root().join("tests/c/harness.c"))
        .arg(root().join("tests/c/second.c"))
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lvlc_compress", "-lpthread", "-lm"])
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(status.success(), "compiling the C harness ({name}) failed");
    let run = Command::new(&exe)
        .arg(&out)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(run.status.success(), "C harness ({name}) failed");
    assert!(
        stdout.contains(" passed, 0 failed"),
        "C harness ({name}) printed no summary"
    );
    let _ = std::fs::remove_dir_all(Path::new(&out));
}

#[test]
fn c_harness() {
    build_and_run("plain", &[], &[]);
}

#[test]
fn c_harness_under_sanitizers() {
    build_and_run(
        "asan",
        &[
            "-fsanitize=address,undefined",
            "-fno-omit-frame-pointer",
            "-fno-sanitize-recover=all",
        ],
        &[
            ("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1"),
            ("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1"),
            // Mesa's software Vulkan driver keeps 128 bytes per Vulkan instance after it is
            // unloaded (inside the driver, where LeakSanitizer cannot name it). This pass runs
            // with no Vulkan driver, so WGPU answers "unavailable"; the plain pass opens it.
            ("VK_DRIVER_FILES", "/nonexistent/icd.json"),
            ("VK_ICD_FILENAMES", "/nonexistent/icd.json"),
        ],
    );
}
