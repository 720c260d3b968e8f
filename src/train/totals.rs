//! Running totals of a run (saved in checkpoints) and the [`RunSummary`] made from them.

use serde::{Deserialize, Serialize};

use super::record::{NormCounters, RunSummary, SCHEMA};
use crate::ops::TelemetrySnapshot;

/// Forward and backward counters of a telemetry period, summed.
pub fn counters_of(s: &TelemetrySnapshot) -> NormCounters {
    NormCounters {
        nonfinite_in: s.forward.nonfinite_in + s.backward.nonfinite_in,
        acc_overflow: s.forward.acc_overflow + s.backward.acc_overflow,
        nonfinite_out: s.forward.nonfinite_out + s.backward.nonfinite_out,
        fp8: s.fp8,
    }
}

/// `a + b`, field by field.
pub fn add_counters(a: NormCounters, b: NormCounters) -> NormCounters {
    NormCounters {
        nonfinite_in: a.nonfinite_in + b.nonfinite_in,
        acc_overflow: a.acc_overflow + b.acc_overflow,
        nonfinite_out: a.nonfinite_out + b.nonfinite_out,
        fp8: a.fp8 + b.fp8,
    }
}

/// f64 values stored by their bit patterns (16 hex digits): serde_json's default float parser
/// is not always correctly rounded, and a resumed run must continue from exactly the values
/// it saved.
mod exact {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    fn to_hex(v: f64) -> String {
        format!("{:016x}", v.to_bits())
    }

    fn from_hex<E: Error>(s: &str) -> Result<f64, E> {
        u64::from_str_radix(s, 16).map(f64::from_bits).map_err(|_| E::custom(format!("not 16 hex digits: {s:?}")))
    }

    pub mod scalar {
        use super::*;
        pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(&to_hex(*v))
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
            from_hex(&String::deserialize(d)?)
        }
    }

    pub mod option {
        use super::*;
        pub fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
            match v {
                Some(x) => s.serialize_some(&to_hex(*x)),
                None => s.serialize_none(),
            }
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
            Option::<String>::deserialize(d)?.map(|s| from_hex(&s)).transpose()
        }
    }

    pub mod vec {
        use super::*;
        use serde::Serialize;
        pub fn serialize<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
            v.iter().map(|x| to_hex(*x)).collect::<Vec<_>>().serialize(s)
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
            Vec::<String>::deserialize(d)?.iter().map(|s| from_hex(s)).collect()
        }
    }
}

/// What the summary needs, accumulated step by step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunTotals {
    /// Steps run (the diverged one included).
    pub steps: u64,
    pub tokens: u64,
    /// Training-step counters (evaluation forwards are not counted).
    pub counters: NormCounters,
    /// Counters since the last step record (a record covers the steps since the previous one).
    pub pending: NormCounters,
    pub skipped_steps: u64,
    #[serde(with = "exact::vec")]
    pub step_times_s: Vec<f64>,
    /// Finite validation losses only.
    #[serde(with = "exact::option")]
    pub best_val_loss: Option<f64>,
    #[serde(with = "exact::option")]
    pub final_val_loss: Option<f64>,
    pub last_eval_step: Option<u64>,
    pub diverged_at: Option<u64>,
    /// Wall time of the segments before the current one.
    #[serde(with = "exact::scalar")]
    pub wall_s: f64,
}

impl RunTotals {
    /// Note a validation loss.
    pub fn eval(&mut self, step: u64, val_loss: f64) {
        self.last_eval_step = Some(step);
        self.final_val_loss = val_loss.is_finite().then_some(val_loss);
        if val_loss.is_finite() && self.best_val_loss.is_none_or(|b| val_loss < b) {
            self.best_val_loss = Some(val_loss);
        }
    }

    /// Median of the step times (0 when there are none).
    pub fn median_step_time_s(&self) -> f64 {
        let mut t = self.step_times_s.clone();
        if t.is_empty() {
            return 0.0;
        }
        t.sort_by(f64::total_cmp);
        let n = t.len();
        if n % 2 == 1 {
            t[n / 2]
        } else {
            0.5 * (t[n / 2 - 1] + t[n / 2])
        }
    }

    /// The summary of the run so far.
    pub fn summary(&self, cfg: &super::ExperimentConfig, name: &str, config_hash: &str, wall_s: f64) -> RunSummary {
        let time: f64 = self.step_times_s.iter().sum();
        RunSummary {
            schema: SCHEMA.to_string(),
            name: name.to_string(),
            arch: cfg.model.arch.name().to_string(),
            norm: cfg.model.norm.name(),
            precision: cfg.train.precision.name().to_string(),
            seed: cfg.train.seed,
            steps: self.steps,
            tokens: self.tokens,
            final_val_loss: self.final_val_loss,
            best_val_loss: self.best_val_loss,
            diverged_at: self.diverged_at,
            counters: self.counters,
            median_step_time_s: self.median_step_time_s(),
            tokens_per_s: if time > 0.0 { self.tokens as f64 / time } else { 0.0 },
            wall_s,
            skipped_steps: self.skipped_steps,
            config_hash: config_hash.to_string(),
        }
    }
}

/// sha256 of the canonical JSON of a config (struct field order, serde_json's number format).
pub fn config_hash(cfg: &super::ExperimentConfig) -> String {
    let json = serde_json::to_string(cfg).unwrap_or_default();
    crate::data::checksum::sha256_hex(json.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_best() {
        let mut t = RunTotals { step_times_s: vec![3.0, 1.0, 2.0, 10.0], ..Default::default() };
        assert_eq!(t.median_step_time_s(), 2.5);
        t.step_times_s.pop();
        assert_eq!(t.median_step_time_s(), 2.0);
        t.eval(10, 3.0);
        t.eval(20, f64::NAN);
        t.eval(30, 2.0);
        t.eval(40, 2.5);
        assert_eq!((t.best_val_loss, t.final_val_loss, t.last_eval_step), (Some(2.0), Some(2.5), Some(40)));
        // Bit-exact through JSON, whatever the value.
        t.wall_s = 0.1 + 0.2;
        t.step_times_s.push(0.009938441702975687);
        t.final_val_loss = Some(1.0 / 3.0);
        let back: RunTotals = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back, t);
    }
}
