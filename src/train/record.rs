//! What a training run writes: one JSON object per line in `RUN_DIR/metrics.jsonl`, and
//! `RUN_DIR/summary.json` at the end. This is the contract between the training loop and the
//! comparison report; change it only together with `SCHEMA`.
//!
//! Every line carries `"kind"`: `"step"` ([`StepRecord`], every logged step), `"eval"`
//! ([`EvalRecord`], every `eval_every` steps and at the end) or `"diverged"`
//! ([`DivergedRecord`], once, at the first non-finite loss).

use serde::{Deserialize, Serialize};

/// JSON has no NaN or infinity (serde_json writes them as `null`, which does not read back as a
/// number): the fields that can be non-finite (losses, gradient norms, probed norms) write them
/// as the strings `"NaN"`, `"inf"`, `"-inf"` and read either form back.
mod nonfinite {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else if v.is_nan() {
            s.serialize_str("NaN")
        } else if *v > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Number(f64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        match Repr::deserialize(d)? {
            Repr::Number(x) => Ok(x),
            Repr::Text(t) => match t.as_str() {
                "NaN" => Ok(f64::NAN),
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                other => Err(D::Error::custom(format!("expected a number, \"NaN\", \"inf\" or \"-inf\", got {other:?}"))),
            },
        }
    }
}

/// Schema tag of `summary.json`.
pub const SCHEMA: &str = "normlab.run/1";

/// The norms' counters over a period (forward and backward summed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NormCounters {
    pub nonfinite_in: u64,
    pub acc_overflow: u64,
    pub nonfinite_out: u64,
    /// With `train.fp8_norm_io`: the E4M3 stores of the norm sites' inputs and outputs (values
    /// stored, underflows to zero, subnormals, non-finite). Absent from the JSON when all zero
    /// (every run without fp8 storage), so those lines are unchanged.
    #[serde(default, skip_serializing_if = "crate::ops::Fp8Counters::is_zero")]
    pub fp8: crate::ops::Fp8Counters,
}

/// One optimizer step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub step: u64,
    #[serde(with = "nonfinite")]
    pub loss: f64,
    pub lr: f64,
    /// Global L2 norm of the gradient before clipping (unscaled; non-finite on an overflow step).
    #[serde(with = "nonfinite")]
    pub grad_norm: f64,
    pub step_time_s: f64,
    pub tokens_per_s: f64,
    /// Wall time since the run (or its first segment) started, resumed segments included.
    pub wall_s: f64,
    pub counters: NormCounters,
    /// f16 mixed precision: the loss scale used at this step.
    pub loss_scale: Option<f64>,
    /// The step was skipped (non-finite gradient under dynamic loss scaling).
    pub skipped: bool,
}

/// Per-layer norms at an evaluation point (the anGPT paper's "curse of depth" plot).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerNorms {
    pub layer: usize,
    /// Mean over tokens of ||h|| of the residual stream after the layer.
    #[serde(with = "nonfinite")]
    pub residual_norm: f64,
    /// Mean over tokens of the attention block's output norm (before it joins the stream).
    #[serde(with = "nonfinite")]
    pub attn_out_norm: f64,
    /// Mean over tokens of the MLP block's output norm.
    #[serde(with = "nonfinite")]
    pub mlp_out_norm: f64,
}

/// An evaluation point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalRecord {
    pub step: u64,
    #[serde(with = "nonfinite")]
    pub val_loss: f64,
    pub wall_s: f64,
    pub layers: Vec<LayerNorms>,
    /// Variance of Adam's first moment per parameter group (group name -> variance).
    pub adam_m_var: std::collections::BTreeMap<String, f64>,
}

/// The first non-finite loss.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DivergedRecord {
    pub step: u64,
    #[serde(with = "nonfinite")]
    pub loss: f64,
}

/// One line of `metrics.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    Step(StepRecord),
    Eval(EvalRecord),
    Diverged(DivergedRecord),
}

/// `summary.json`: what the comparison needs of a finished run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub schema: String,
    /// The run's name (`arch-norm-precision-sSEED`).
    pub name: String,
    pub arch: String,
    pub norm: String,
    pub precision: String,
    pub seed: u64,
    pub steps: u64,
    pub tokens: u64,
    pub final_val_loss: Option<f64>,
    pub best_val_loss: Option<f64>,
    pub diverged_at: Option<u64>,
    pub counters: NormCounters,
    pub median_step_time_s: f64,
    pub tokens_per_s: f64,
    pub wall_s: f64,
    /// Overflow-skipped steps under dynamic loss scaling.
    pub skipped_steps: u64,
    /// sha256 of the canonical JSON of the run's config.
    pub config_hash: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonfinite_values_round_trip() {
        for loss in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 2.5] {
            let r = Record::Diverged(DivergedRecord { step: 7, loss });
            let line = serde_json::to_string(&r).unwrap();
            let back: Record = serde_json::from_str(&line).unwrap();
            match back {
                Record::Diverged(d) => assert!(d.loss == loss || (d.loss.is_nan() && loss.is_nan()), "{line}"),
                _ => panic!("{line}"),
            }
        }
        let line = r#"{"kind":"diverged","step":3,"loss":"NaN"}"#;
        assert!(matches!(serde_json::from_str::<Record>(line).unwrap(), Record::Diverged(d) if d.loss.is_nan()));
        assert!(serde_json::from_str::<Record>(r#"{"kind":"diverged","step":3,"loss":"big"}"#).is_err());
    }
}
