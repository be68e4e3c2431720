//! Installed builds (`scripts/install.sh` sets VLCC_SONAME=1) give the shared library an soname,
//! libvlc_compress.so.ABI (the C ABI's version, from src/ffi/version.rs), so programs linked
//! against it keep working across compatible upgrades and refuse an incompatible one. In-tree
//! builds leave it out, so tests and bindings link the file cargo writes.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/ffi/version.rs");
    println!("cargo:rerun-if-env-changed=VLCC_SONAME");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|t| t == "linux");
    if linux && std::env::var("VLCC_SONAME").is_ok_and(|v| v == "1") {
        let src = std::fs::read_to_string("src/ffi/version.rs").expect("src/ffi/version.rs");
        let abi = src
            .lines()
            .find_map(|l| l.strip_prefix("const ABI_VERSION: u32 = "))
            .and_then(|v| v.strip_suffix(';'))
            .expect("src/ffi/version.rs defines ABI_VERSION");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libvlc_compress.so.{abi}");
    }
}
