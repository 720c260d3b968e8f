//! Bad arguments give candle errors naming the values, never a panic.

use candle_core::{DType, Device, Module, Tensor};
use normlab::norms::{Accum, NormSpec};
use normlab::ops::{norm, L1Norm, LayerNorm, Norm, TopKNorm};

fn err_of(r: candle_core::Result<Tensor>) -> String {
    match r {
        Ok(t) => panic!("expected an error, got a tensor of shape {:?}", t.dims()),
        Err(e) => e.to_string(),
    }
}

fn contains_all(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "error message {msg:?} should name {p:?}");
    }
}

#[test]
fn weight_and_bias_mismatches_are_named() -> candle_core::Result<()> {
    let dev = Device::Cpu;
    let x = Tensor::zeros((2, 4), DType::F32, &dev)?;
    let w16 = Tensor::ones(4, DType::F16, &dev)?;
    let w5 = Tensor::ones(5, DType::F32, &dev)?;
    let w2d = Tensor::ones((1, 4), DType::F32, &dev)?;
    let spec = NormSpec::l1(1e-5);
    contains_all(&err_of(norm(&x, &spec, Accum::F32, Some(&w16), None, None)), &["weight", "F16", "F32"]);
    contains_all(&err_of(norm(&x, &spec, Accum::F32, None, Some(&w5), None)), &["bias", "[4]", "[5]"]);
    contains_all(&err_of(norm(&x, &spec, Accum::F32, Some(&w2d), None, None)), &["weight", "[1, 4]"]);
    contains_all(&err_of(L1Norm::new(4, 1e-5).with_weight(&w16).forward(&x)), &["weight", "F16"]);
    Ok(())
}

#[test]
fn input_problems_are_named() -> candle_core::Result<()> {
    let dev = Device::Cpu;
    let x = Tensor::zeros((2, 4), DType::F32, &dev)?;
    contains_all(&err_of(LayerNorm::new(5, 1e-5).forward(&x)), &["5", "4", "last dimension"]);
    contains_all(&err_of(LayerNorm::new(1, 1e-5).forward(&Tensor::new(1f32, &dev)?)), &["scalar"]);
    let xi = Tensor::zeros((2, 4), DType::U32, &dev)?;
    contains_all(&err_of(norm(&xi, &NormSpec::rms(1e-6), Accum::F32, None, None, None)), &["U32"]);
    let x0 = Tensor::zeros((2, 0), DType::F32, &dev)?;
    contains_all(&err_of(norm(&x0, &NormSpec::rms(1e-6), Accum::F32, None, None, None)), &["0"]);
    Ok(())
}

#[test]
fn spec_problems_are_named() -> candle_core::Result<()> {
    let x = Tensor::zeros((2, 4), DType::F32, &Device::Cpu)?;
    contains_all(&err_of(TopKNorm::new(4, 5, 1e-5).forward(&x)), &["k = 5", "n = 4"]);
    contains_all(&err_of(L1Norm::new(4, -1.0).forward(&x)), &["eps", "-1"]);
    contains_all(&err_of(LayerNorm::new(4, 1e-5).with_centred(false).forward(&x)), &["uncentred LayerNorm"]);
    contains_all(&err_of(Norm::new(NormSpec::rms(f64::NAN), 4).forward(&x)), &["eps", "NaN"]);
    Ok(())
}
