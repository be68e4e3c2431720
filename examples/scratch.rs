use vlc_compress::train::train_anchors;
use vlc_compress::*;
fn main() {
    let x = synth::clustered(60_000, 96, 300, 5);
    let ctx = Context::new(BackendKind::Cpu, 0, 0).unwrap();
    for seed in 1..6 {
        let p = AnchorParams {
            anchors: 256,
            trim: 0.05,
            seed,
            ..AnchorParams::default()
        };
        let r = ctx
            .run(|b| train_anchors(b, &x, 96, &p, &NoProgress))
            .unwrap();
        println!("seed {seed} energy {}", r.energy);
    }
}
