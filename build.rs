//! Installed builds (`scripts/install.sh` sets VLCC_SONAME=1) give the shared library an soname,
//! libvlc_compress.so.MAJOR, so programs linked against it keep working across compatible
//! upgrades. In-tree builds leave it out, so tests and bindings link the file cargo writes.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=VLCC_SONAME");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|t| t == "linux");
    if linux && std::env::var("VLCC_SONAME").is_ok_and(|v| v == "1") {
        let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libvlc_compress.so.{major}");
    }
}
