//! What wgpu's cooperative matrices reach on the first GPU adapter: the products of a
//! nearest-anchor assignment (fp16 inputs, fp32 sums) on 16 x 16 x 16 fragments, for several
//! shapes of the work each subgroup owns, with and without a pass through workgroup memory
//! per chunk of anchors. It prints TFLOP/s per variant, to choose mma.wgsl's layout by.
//!
//!     cargo bench --bench coop_ceiling
//!
//! Needs an adapter with `EXPERIMENTAL_COOPERATIVE_MATRIX` (16 x 16 x 16, fp16 x fp16 +
//! fp32) and one subgroup size; says so and exits where there is none.

use std::time::Instant;
use wgpu::util::DeviceExt;

const TEMPLATE: &str = include_str!("../kernels/wgpu/coop_probe.wgsl.part");

/// Rows per subgroup / 16, anchors per chunk / 16, subgroups per workgroup, scan per chunk.
#[derive(Clone, Copy)]
struct Variant {
    tm: u32,
    tn: u32,
    ns: u32,
    scan: bool,
}

/// Variants measured: (tm, tn, ns, scan).
const VARIANTS: &[(u32, u32, u32, bool)] = &[
    (1, 4, 8, true),
    (1, 4, 8, false),
    (2, 2, 4, false),
    (2, 4, 4, false),
    (2, 4, 4, true),
    (4, 2, 4, false),
    (4, 4, 2, false),
    (4, 4, 2, true),
    (2, 8, 2, false),
];

fn source(v: Variant, sg: u32) -> String {
    let pairs: Vec<(u32, u32)> = (0..v.tm)
        .flat_map(|i| (0..v.tn).map(move |j| (i, j)))
        .collect();
    let lines = |f: &dyn Fn(u32, u32) -> String| {
        pairs
            .iter()
            .map(|&(i, j)| f(i, j))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let decl = lines(&|i, j| format!("    var c_{i}_{j} = coop_mat16x16<f32, C>();"));
    let zero = lines(&|i, j| format!("        c_{i}_{j} = coop_mat16x16<f32, C>();"));
    let mut loads: Vec<String> = (0..v.tm)
        .map(|i| {
            format!(
                "            let a{i} = coopLoadT<coop_mat16x16<f16, A>>(&xh[(i0 + {}u) * P.dp + k], P.dp);",
                16 * i
            )
        })
        .collect();
    loads.extend((0..v.tn).map(|j| {
        format!(
            "            let b{j} = coopLoad<coop_mat16x16<f16, B>>(&bh[(j0 + {}u) * P.dp + k], P.dp);",
            16 * j
        )
    }));
    let mmas =
        lines(&|i, j| format!("            c_{i}_{j} = coopMultiplyAdd(a{i}, b{j}, c_{i}_{j});"));
    let scan = lines(&|i, j| {
        format!(
            "        coopStore(c_{i}_{j}, &tile[t0], 16u);\n        workgroupBarrier();\n        for (var e = lane; e < 256u; e += SG) {{ best = min(best, tile[t0 + e]); }}\n        workgroupBarrier();"
        )
    });
    let (zero, per_chunk, at_end) = match v.scan {
        true => (zero, scan, String::new()),
        false => (
            String::new(),
            String::new(),
            scan.replace("\n        ", "\n    "),
        ),
    };
    let mut s = TEMPLATE
        .replace("@DECL", &decl)
        .replace("@ZERO", &zero)
        .replace("@LOADS", &loads.join("\n"))
        .replace("@MMAS", &mmas)
        .replace("@SCAN", &per_chunk)
        .replace("@KEEP", &at_end)
        .replace(
            "@workgroup_size(128)",
            &format!("@workgroup_size({})", v.ns * sg),
        );
    for (name, val) in [("SG", sg), ("NS", v.ns), ("TM", v.tm), ("TN", v.tn)] {
        s = vlc_compress::backend::wgpu::with_const(&s, name, val);
    }
    s
}

fn main() {
    let backends = wgpu::Backends::VULKAN | wgpu::Backends::METAL;
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends;
    let instance = wgpu::Instance::new(desc);
    let adapters = pollster::block_on(instance.enumerate_adapters(backends));
    let Some(adapter) = adapters
        .into_iter()
        .find(|a| a.get_info().device_type != wgpu::DeviceType::Cpu)
    else {
        println!("no GPU adapter");
        return;
    };
    let info = adapter.get_info();
    let need = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
        | wgpu::Features::SHADER_F16
        | wgpu::Features::SUBGROUP;
    if !adapter.features().contains(need) || info.subgroup_min_size != info.subgroup_max_size {
        println!(
            "{}: no cooperative matrices with one subgroup size",
            info.name
        );
        return;
    }
    let sg = info.subgroup_min_size;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: None,
        required_features: need,
        required_limits: adapter.limits(),
        // SAFETY: cooperative matrices are the one experimental feature used.
        experimental_features: unsafe { wgpu::ExperimentalFeatures::enabled() },
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    }))
    .expect("device");
    println!("{} (subgroups of {sg})", info.name);
    println!(
        "{:>9} {:>5} {:>5} | {:>2} {:>2} {:>2} {:>4} | {:>9} {:>8}",
        "rows", "dim", "k", "tm", "tn", "ns", "scan", "ms", "TFLOP/s"
    );
    for (m, dp, n) in [(262_144u32, 128u32, 1024u32), (131_072, 384, 4096)] {
        let half = |len: u32, seed: u32| -> Vec<half::f16> {
            (0..len)
                .map(|i| {
                    half::f16::from_f32(
                        ((i.wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 1000.0 - 0.5,
                    )
                })
                .collect()
        };
        let buf = |data: &[half::f16], usage| {
            device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: None,
                contents: bytemuck::cast_slice(data),
                usage,
            })
        };
        let xh = buf(&half(m * dp, 1), wgpu::BufferUsages::STORAGE);
        let bh = buf(&half(n * dp, 2), wgpu::BufferUsages::STORAGE);
        for &(tm, tn, ns, scan) in VARIANTS {
            let v = Variant { tm, tn, ns, scan };
            let groups = m / (16 * tm * ns);
            let gx = groups.min(65_535);
            let gy = groups.div_ceil(gx);
            let out = device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: (gx * gy * ns * sg * 4) as u64,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            });
            let params = [n, dp, gx, 0u32];
            let ub = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: None,
                contents: bytemuck::cast_slice(&params),
                usage: wgpu::BufferUsages::UNIFORM,
            });
            let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
            // SAFETY: every index stays within its buffer (rows and anchors are whole
            // multiples of the tiles) and every loop ends.
            let module = unsafe {
                device.create_shader_module_trusted(
                    wgpu::ShaderModuleDescriptor {
                        label: None,
                        source: wgpu::ShaderSource::Wgsl(source(v, sg).into()),
                    },
                    wgpu::ShaderRuntimeChecks::unchecked(),
                )
            };
            let pipe = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: None,
                layout: None,
                module: &module,
                entry_point: Some("probe"),
                compilation_options: Default::default(),
                cache: None,
            });
            if let Some(e) = pollster::block_on(scope.pop()) {
                println!("tm {tm} tn {tn} ns {ns} scan {scan}: {e}");
                continue;
            }
            let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipe.get_bind_group_layout(0),
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: ub.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: xh.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 2,
                        resource: bh.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 3,
                        resource: out.as_entire_binding(),
                    },
                ],
            });
            let run = |reps: u32| {
                let mut enc = device.create_command_encoder(&Default::default());
                {
                    let mut pass = enc.begin_compute_pass(&Default::default());
                    pass.set_pipeline(&pipe);
                    pass.set_bind_group(0, &bind, &[]);
                    for _ in 0..reps {
                        pass.dispatch_workgroups(gx, gy, 1);
                    }
                }
                let t = Instant::now();
                queue.submit([enc.finish()]);
                device
                    .poll(wgpu::PollType::wait_indefinitely())
                    .expect("poll");
                t.elapsed().as_secs_f64()
            };
            run(1);
            let reps = 10;
            let best = (0..3).map(|_| run(reps)).fold(f64::MAX, f64::min) / reps as f64;
            let tflops = 2.0 * m as f64 * n as f64 * dp as f64 / best / 1e12;
            println!(
                "{m:>9} {dp:>5} {n:>5} | {tm:>2} {tn:>2} {ns:>2} {:>4} | {:>9.3} {tflops:>8.1}",
                scan as u8,
                best * 1e3
            );
        }
    }
}
