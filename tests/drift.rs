//! The header's statuses and parameters, and everything that must follow them: the Go
//! binding's constants and the command's training flags. A status or parameter added to the C
//! ABI and forgotten in a binding or the CLI fails here.

use std::path::Path;

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

/// The names of the header's enum members that start with `prefix` (`NAME = number,`).
fn members(header: &str, prefix: &str) -> Vec<String> {
    header
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with(prefix) && l.contains(" = "))
        .map(|l| l.split(" = ").next().unwrap().to_string())
        .collect()
}

#[test]
fn the_go_binding_names_every_status_and_parameter() {
    let header = read("include/vlc_compress.h");
    let go = read("bindings/go/vlccompress.go");
    let all: Vec<String> = ["VLCC_STATUS_", "VLCC_PARAM_"]
        .iter()
        .flat_map(|p| members(&header, p))
        .collect();
    assert!(all.len() >= 17 + 22, "parsed {} members", all.len());
    let missing: Vec<&String> = all
        .iter()
        .filter(|m| !go.contains(&format!("C.{m}")))
        .collect();
    assert!(missing.is_empty(), "the Go binding lacks {missing:?}");
}

#[test]
fn the_command_trains_with_every_parameter() {
    let header = read("include/vlc_compress.h");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vlcc"))
        .args(["train", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    // Flags named otherwise than their parameter.
    let alias = |p: &str| match p {
        "bytes-per-vector" => "bytes".to_string(),
        "max-iters" => "iters".to_string(),
        "opq-train-points" => "opq-points".to_string(),
        "precision" => "tf32".to_string(),
        p => p.to_string(),
    };
    let missing: Vec<String> = members(&header, "VLCC_PARAM_")
        .iter()
        .map(|m| alias(&m["VLCC_PARAM_".len()..].to_lowercase().replace('_', "-")))
        .filter(|flag| {
            !help.contains(&format!("--{flag} ")) && !help.contains(&format!("--{flag}\n"))
        })
        .collect();
    assert!(missing.is_empty(), "vlcc train has no flag for {missing:?}");
}
