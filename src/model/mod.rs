//! The language models: GPT+, nGPT and anGPT on candle, with the norm inside them a choice.
//!
//! Contract with the training loop (`crate::train`):
//! - [`build`] creates a model with its parameters in a [`ParamStore`] (candle `Var`s in the
//!   storage dtype the precision mode asks for: f32 for f32 and mixed modes, f16/bf16 for the
//!   pure modes), initialised from a seed, already projected (nGPT/anGPT constraints hold).
//! - [`LanguageModel::forward`] runs in `ctx.compute` (parameters are cast at use, which is
//!   differentiable, so mixed precision gets f32 gradients on f32 masters) and returns f32
//!   logits `[B, T, vocab]`, plus per-layer norms when `ctx.probes`.
//! - [`LanguageModel::project`] applies the post-optimizer-step constraints in place on the
//!   `Var`s the optimizer owns (nGPT unit norm, anGPT `||w|| <= 1`; GPT+: nothing).
//! - The norms' counters accumulate in [`LanguageModel::telemetry`].

pub mod config;

pub use config::{Arch, ModelConfig, NormChoice};
