//! Every CUDA kernel file compiles through NVRTC, GPU or not. Without the NVRTC library the
//! test is skipped on a developer machine and fails when `CI` is set: CI must prove the
//! kernels build.

use vlc_compress::backend::cuda;

/// Every `.ext` file under kernels/`dir`/ is built into the library: none may be forgotten.
fn all_listed(dir: &str, ext: &str, listed: &[(&str, &str)]) {
    let files: Vec<String> =
        std::fs::read_dir(format!("{}/kernels/{dir}", env!("CARGO_MANIFEST_DIR")))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|f| f.ends_with(ext))
            .collect();
    for f in &files {
        assert!(
            listed.iter().any(|(name, _)| name == f),
            "kernels/{dir}/{f} is not listed in backend::{dir}::KERNELS"
        );
    }
    assert_eq!(files.len(), listed.len());
}

#[test]
fn every_cuda_kernel_compiles() {
    all_listed("cuda", ".cu", cuda::KERNELS);
    for (name, src) in cuda::KERNELS {
        match cuda::compile(name, src) {
            Ok(ptx) => assert!(ptx.to_src().contains(".entry"), "{name}: no kernels in PTX"),
            Err(vlc_compress::Error::BackendUnavailable(why))
                if std::env::var_os("CI").is_none() =>
            {
                eprintln!("skipped: {why} (set LD_LIBRARY_PATH to the NVRTC wheel's lib folder)");
                return;
            }
            Err(e) => panic!("{name}: {e}"),
        }
    }
}

/// Every WGSL file parses, validates and translates to SPIR-V with naga (what wgpu does with
/// them on Vulkan), as written and with the constants the backend sets from adapter limits.
#[cfg(feature = "wgpu")]
#[test]
fn every_wgsl_kernel_validates() {
    use vlc_compress::backend::wgpu;
    all_listed("wgpu", ".wgsl", wgpu::KERNELS);
    let validate = |name: &str, src: &str| {
        let module = naga::front::wgsl::parse_str(src)
            .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(src)));
        // The cooperative-matrix kernels need what their adapters must have (fp16,
        // subgroups, cooperative matrices); the rest need nothing.
        let caps = match name {
            "mma.wgsl" => {
                use naga::valid::Capabilities as C;
                C::SHADER_FLOAT16 | C::SUBGROUP | C::COOPERATIVE_MATRIX
            }
            _ => naga::valid::Capabilities::empty(),
        };
        let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
            .validate(&module)
            .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(src)));
        assert!(!module.entry_points.is_empty(), "{name}: no entry points");
        naga::back::spv::write_vec(&module, &info, &Default::default(), None)
            .unwrap_or_else(|e| panic!("{name}: SPIR-V: {e}"));
    };
    for (name, src) in wgpu::KERNELS {
        validate(name, src);
        // Smaller adapters and other index shapes.
        for (wg, lut, want, d4) in [(64, 2048, 16, 1), (128, 11264, 128, 3), (256, 256, 1, 8)] {
            let s = wgpu::with_const(src, "WG", wg);
            let s = wgpu::with_const(&s, "LUT", lut);
            let s = wgpu::with_const(&s, "WANT", want);
            let s = wgpu::with_const(&s, "D4", d4);
            let s = wgpu::with_const(&s, "TK", if wg == 64 { 8 } else { 16 });
            let s = wgpu::with_const(&s, "SG", if wg == 64 { 64 } else { 32 });
            validate(name, &s);
        }
    }
}
