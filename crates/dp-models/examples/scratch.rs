use candle_core::{Device, Tensor};
use dp_mechanisms::NoiseSource;
use dp_models::fused::{ClipRule, FusedModel};
use dp_models::loss::cross_entropy;
use dp_models::models::{mnist_cnn, Activation};
use std::time::Instant;
fn main() -> dp_models::Result<()> {
    let mut noise = NoiseSource::seeded(0);
    let net = FusedModel::new(mnist_cnn(Activation::Tanh)?, &mut noise)?;
    for batch in [16usize, 64, 256, 512] {
        let x: Vec<f32> = (0..batch * 784).map(|_| noise.uniform() as f32).collect();
        let y: Vec<u32> = (0..batch).map(|i| (i % 10) as u32).collect();
        let x = Tensor::from_vec(x, (batch, 784), &Device::Cpu)?;
        let mut tf = vec![]; let mut tb = vec![];
        for _ in 0..15 {
            let t = Instant::now();
            let logits: Vec<f32> = net.forward(&x)?.flatten_all()?.to_vec1()?;
            tf.push(t.elapsed().as_secs_f64()*1e3);
            let (_, d) = cross_entropy(&logits, &y, 10);
            let t = Instant::now();
            let _ = net.backward(&Tensor::from_vec(d, (batch, 10), &Device::Cpu)?, ClipRule::Flat { max_norm: 1.0 })?;
            tb.push(t.elapsed().as_secs_f64()*1e3);
        }
        tf.sort_by(f64::total_cmp); tb.sort_by(f64::total_cmp);
        println!("B={batch}: fwd {:.2} ms ({:.1} us/sample) bwd {:.2} ms ({:.1} us/sample)", tf[7], tf[7]*1e3/batch as f64, tb[7], tb[7]*1e3/batch as f64);
    }
    Ok(())
}
