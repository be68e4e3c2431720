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
fn the_go_binding_has_a_sentinel_for_every_failing_status() {
    // `StatusY Status = C.VLCC_STATUS_X` for each status; every one but OK needs
    // `ErrY = &Error{Status: StatusY}` for errors.Is.
    let go = read("bindings/go/vlccompress.go");
    let flat = |l: &str| l.split_whitespace().collect::<Vec<_>>().join(" ");
    let statuses: Vec<String> = go
        .lines()
        .map(flat)
        .filter(|l| l.starts_with("Status") && l.contains("= C.VLCC_STATUS_"))
        .filter(|l| !l.ends_with("C.VLCC_STATUS_OK"))
        .map(|l| {
            l.split(' ')
                .next()
                .unwrap()
                .trim_start_matches("Status")
                .to_string()
        })
        .collect();
    assert!(statuses.len() >= 16, "parsed {statuses:?}");
    let lines: Vec<String> = go.lines().map(flat).collect();
    let missing: Vec<&String> = statuses
        .iter()
        .filter(|y| !lines.contains(&format!("Err{y} = &Error{{Status: Status{y}}}")))
        .collect();
    assert!(missing.is_empty(), "no Go sentinel for {missing:?}");
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

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn the_library_reads_no_environment_and_writes_no_stderr() {
    // A library runs inside someone else's process: options come through `BackendOptions`,
    // and only the command (src/bin) reads variables or prints. Unit tests may do either.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut found = Vec::new();
    for f in files.iter().filter(|f| !f.starts_with(root.join("bin"))) {
        let text = std::fs::read_to_string(f).unwrap();
        for (i, line) in code(&text).lines().enumerate() {
            if ["env::var", "eprint", "println!", "print!("]
                .iter()
                .any(|p| line.contains(p))
            {
                found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(files.len() > 40, "found {} sources", files.len());
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_header_parameters_are_the_table() {
    // `vlcc_param` in the header: each member's number, its name and the default its doc
    // states are the parameter table's (`vlcc_param_bounds` reads the table).
    let header = read("include/vlc_compress.h");
    let body = header
        .split("enum {")
        .find(|b| b.contains("VLCC_PARAM_ANCHORS"))
        .unwrap();
    let body = body.split('}').next().unwrap();
    let mut doc = String::new();
    let mut seen = Vec::new();
    for line in body.lines().map(str::trim) {
        if let Some(t) = line.strip_prefix("* ") {
            doc.push_str(t);
            doc.push(' ');
            continue;
        }
        let Some((name, id)) = line.trim_end_matches(',').split_once(" = ") else {
            continue;
        };
        let id: u32 = id.parse().unwrap();
        let p = vlc_compress::params::param(id).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            name.strip_prefix("VLCC_PARAM_").unwrap().to_lowercase(),
            p.name,
            "id {id}"
        );
        let stated = doc
            .split("Default ")
            .nth(1)
            .map(|t| t.split([' ', ')']).next().unwrap().trim_end_matches('.'));
        let default = match stated {
            Some("L2") => 0.0,
            Some(v) => v
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("{name}: default {v:?}")),
            None => panic!("{name}: its doc states no default: {doc}"),
        };
        assert!(
            (default - p.default).abs() <= 1e-6 * p.default.abs(),
            "{name}: the header says {default}, the table {}",
            p.default
        );
        seen.push(id);
        doc.clear();
    }
    let all: Vec<u32> = vlc_compress::params::params().map(|p| p.id).collect();
    assert_eq!(seen, all, "the header's parameters and the table's");
}

/// Every function of the C header is reachable from the Go binding and the C++ wrapper (a
/// function added to the ABI and forgotten in a binding fails here).
#[test]
fn the_bindings_call_every_c_function() {
    let header = read("include/vlc_compress.h");
    let functions: Vec<&str> = header
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with('*') && !l.starts_with('#'))
        .filter_map(|l| {
            let name = l.split('(').next()?.rsplit([' ', '*']).next()?;
            (name.starts_with("vlcc_") && l.contains('(')).then_some(name)
        })
        .collect();
    assert!(
        functions.len() > 60,
        "found only {} functions",
        functions.len()
    );
    // Every source file of the binding, its tests left out.
    let mut go_files: Vec<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("bindings/go"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|f| f.ends_with(".go") && !f.ends_with("_test.go"))
            .collect();
    go_files.sort();
    assert!(go_files.len() >= 3, "found {go_files:?}");
    let go: String = go_files
        .iter()
        .map(|f| read(&format!("bindings/go/{f}")))
        .collect();
    let cpp = read("bindings/cpp/vlc_compress.hpp");
    let calls = |src: &str, f: &str| src.contains(&format!("{f}("));
    let missing: Vec<String> = functions
        .iter()
        .flat_map(|f| {
            let go = (!calls(&go, f)).then(|| format!("Go: {f}"));
            let cpp = (!calls(&cpp, f)).then(|| format!("C++: {f}"));
            go.into_iter().chain(cpp)
        })
        .collect();
    assert!(missing.is_empty(), "not called: {missing:?}");
}

/// Every `.rs` file under `dir` (relative to the crate) with its text.
fn source_texts(dir: &str) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join(dir), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// The code of a file without its comments (doc comments included) and its unit tests.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap();
    text.lines()
        .map(|l| l.split("//").next().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether the code names the module (`crate::index`, `super::backend`, `crate::{index`).
fn names(text: &str, module: &str) -> bool {
    let c = code(text);
    [
        format!("crate::{module}"),
        format!("super::{module}"),
        format!("crate::{{{module}"),
    ]
    .iter()
    .any(|p| {
        c.match_indices(p.as_str()).any(|(i, _)| {
            let next = c[i + p.len()..].chars().next();
            !next.is_some_and(|ch| ch.is_alphanumeric() || ch == '_')
        })
    })
}

#[test]
fn the_layers_import_only_downward() {
    // The ground modules: plain numbers, checks and the host's kernels.
    let ground = [
        "src/error.rs",
        "src/check.rs",
        "src/rng.rs",
        "src/trace.rs",
        "src/fallbacks.rs",
        "src/pages.rs",
        "src/synth.rs",
        "src/stage.rs",
        "src/files.rs",
        "src/progress.rs",
        "src/linalg/",
        "src/params/",
    ];
    let above = [
        "backend",
        "quant",
        "index",
        "format",
        "context",
        "compressor",
        "ffi",
        "train",
        "report",
    ];
    let mut wrong = Vec::new();
    for (path, text) in source_texts("src") {
        let lower = |m: &str| names(&text, m).then(|| format!("{path} names {m}"));
        if ground.iter().any(|g| path.starts_with(g)) {
            wrong.extend(above.iter().filter_map(|m| lower(m)));
        }
        if path.starts_with("src/quant/") {
            wrong.extend(lower("index"));
            for concrete in [
                "BackendKind",
                "backend::cuda",
                "backend::wgpu",
                "backend::cpu",
            ] {
                if code(&text).contains(concrete) {
                    wrong.push(format!("{path} names the concrete backend {concrete}"));
                }
            }
        }
        if path.starts_with("src/format/") {
            wrong.extend(lower("index"));
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run back up:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_source_file_grows_past_its_limit() {
    // Past these a file holds more than one concern: split it.
    let mut long: Vec<String> = source_texts("src")
        .into_iter()
        .filter(|(_, t)| t.lines().count() > 800)
        .map(|(p, t)| format!("{p}: {} lines (limit 800)", t.lines().count()))
        .collect();
    for dir in ["bindings/go", "bindings/cpp"] {
        for e in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(dir)).unwrap() {
            let p = e.unwrap().path();
            let n = std::fs::read_to_string(&p).map_or(0, |t| t.lines().count());
            if n > 900 {
                long.push(format!("{}: {n} lines (limit 900)", p.display()));
            }
        }
    }
    assert!(long.is_empty(), "{}", long.join("\n"));
}
