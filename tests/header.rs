//! The committed header agrees with Cargo.toml and with the library's run-time answers.
//! (Freshness against the sources is checked by `cbindgen --verify` in scripts/test.sh.)

fn header() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/include/vlc_compress.h"
    ))
    .unwrap()
}

fn define(h: &str, name: &str) -> String {
    let prefix = format!("#define {name} ");
    h.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("{name} missing"))
        .trim()
        .to_string()
}

#[test]
fn version_macros_match_cargo_and_runtime() {
    let h = header();
    let major: u32 = define(&h, "VLCC_VERSION_MAJOR").parse().unwrap();
    let minor: u32 = define(&h, "VLCC_VERSION_MINOR").parse().unwrap();
    let patch: u32 = define(&h, "VLCC_VERSION_PATCH").parse().unwrap();
    assert_eq!(major.to_string(), env!("CARGO_PKG_VERSION_MAJOR"));
    assert_eq!(minor.to_string(), env!("CARGO_PKG_VERSION_MINOR"));
    assert_eq!(patch.to_string(), env!("CARGO_PKG_VERSION_PATCH"));
    assert_eq!(
        define(&h, "VLCC_VERSION_STRING"),
        format!("\"{}\"", env!("CARGO_PKG_VERSION"))
    );
    // The computed number, as the macro computes it, equals the run-time one.
    assert_eq!(
        major * 10000 + minor * 100 + patch,
        vlc_compress::ffi::vlcc_version_number()
    );
    assert_eq!(
        define(&h, "VLCC_ABI_VERSION").parse::<u32>().unwrap(),
        vlc_compress::ffi::vlcc_abi_version()
    );
    let v = unsafe { std::ffi::CStr::from_ptr(vlc_compress::ffi::vlcc_version()) };
    assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
}

#[test]
fn every_exported_function_is_declared() {
    let h = header();
    let src: String = [
        "compressor.rs",
        "context.rs",
        "index.rs",
        "status.rs",
        "version.rs",
    ]
    .iter()
    .map(|f| {
        std::fs::read_to_string(format!("{}/src/ffi/{f}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    })
    .collect();
    let mut n = 0;
    for line in src.lines() {
        if let Some(rest) = line.split("extern \"C\" fn ").nth(1) {
            let name = rest.split('(').next().unwrap();
            assert!(
                h.contains(&format!("{name}(")),
                "{name} is not in the header"
            );
            n += 1;
        }
    }
    assert!(n >= 30, "found only {n} exported functions");
}

#[test]
fn the_c_harness_calls_every_exported_function() {
    let h = header();
    let harness =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/harness.c")).unwrap();
    let missing: Vec<&str> = h
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .find(|w| w.starts_with("vlcc_") && w.contains('('))
        })
        .map(|w| w.split('(').next().unwrap())
        .filter(|name| !harness.contains(&format!("{name}(")))
        .collect();
    assert!(
        missing.is_empty(),
        "functions the C harness never calls: {missing:?}"
    );
}
