//! `normlab constants`: the scale constants of the L1, L-inf and Top-k norms.
//!
//! Convention (see `normlab_norms::constants`): a norm divides by `D = C * stat(|z|) + eps`;
//! `C` multiplies the statistic so that `C * stat` estimates sigma for Gaussian input, so
//! `C = 1 / E[stat(|Z|)]` with Z iid N(0, 1):
//!
//! - `c_l1 = 1/E|Z| = sqrt(pi/2)`;
//! - `c_inf(n) = 1/E[max_i |Z_i|]` (exact, by quadrature);
//! - `c_topk(n, k) = 1/E[mean of the k largest |Z_i|]` (exact, by quadrature);
//! - `c_code(n) = 0.5 (1 + sqrt(pi ln 4)) / sqrt(2 ln n)`: the "Norm matters" authors' code
//!   constant for L-inf and every Top-k (biased; undefined for n = 1).

use clap::Args;
use normlab_norms::constants;

use crate::cli::output::{print, print_json};
use crate::cli::CliError;

#[derive(Debug, Args)]
#[command(after_help = "C multiplies the statistic so that C * stat estimates sigma for Gaussian input: \
C = 1 / E[stat], where E[max|Z|] and E[mean top-k |Z|] are the expectations over n iid N(0,1). \
c_l1, c_inf and c_topk are exact; c_code is the \"Norm matters\" authors' c(n), used for L-inf and every k.\n\n\
Example: normlab constants --n 1024 --k 8 --json")]
pub struct ConstantsArgs {
    /// Row length n (number of elements the norm reduces over), at least 1.
    #[arg(long)]
    pub n: usize,
    /// k of the Top-k norm (1 <= k <= n); without it, c_topk is not computed.
    #[arg(long)]
    pub k: Option<usize>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What `normlab constants --json` prints.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ConstantsReport {
    pub n: usize,
    pub k: Option<usize>,
    /// `sqrt(pi/2) = 1/E|Z|`.
    pub c_l1: f64,
    /// `1/E[max_i |Z_i|]`, exact.
    pub c_inf: f64,
    /// `1/E[mean of the k largest |Z_i|]`, exact (null without --k).
    pub c_topk: Option<f64>,
    /// The authors' `c(n)` (null for n = 1, where ln n = 0).
    pub c_code: Option<f64>,
    /// `E|Z| = sqrt(2/pi)`.
    pub e_abs: f64,
    /// `E[max_i |Z_i|]` over n iid N(0, 1).
    pub e_max_abs: f64,
    /// `E[mean of the k largest |Z_i|]` (null without --k).
    pub e_topk_mean_abs: Option<f64>,
    pub convention: String,
}

const CONVENTION: &str = "C multiplies the statistic so that C * stat estimates sigma for Gaussian input: \
c_l1 = 1/E|Z|, c_inf = 1/E[max|Z|], c_topk = 1/E[mean top-k |Z|] (exact); c_code = authors' c(n) (biased)";

/// Compute the report, refusing bad n or k with a message naming the value.
pub fn compute(n: usize, k: Option<usize>) -> Result<ConstantsReport, CliError> {
    if n == 0 {
        return Err(CliError::InvalidArg { flag: "--n", value: n.to_string(), why: "a row has at least 1 element".into() });
    }
    if let Some(k) = k {
        if k == 0 || k > n {
            return Err(CliError::InvalidArg { flag: "--k", value: k.to_string(), why: format!("need 1 <= k <= n = {n}") });
        }
    }
    let e_max_abs = constants::e_max_abs(n)?;
    let e_topk_mean_abs = k.map(|k| constants::e_topk_mean_abs(n, k)).transpose()?;
    Ok(ConstantsReport {
        n,
        k,
        c_l1: constants::C_L1,
        c_inf: constants::c_inf(n)?,
        c_topk: k.map(|k| constants::c_topk(n, k)).transpose()?,
        c_code: (n >= 2).then(|| constants::c_code(n)).transpose()?,
        e_abs: 1.0 / constants::C_L1,
        e_max_abs,
        e_topk_mean_abs,
        convention: CONVENTION.into(),
    })
}

fn render_text(r: &ConstantsReport) -> String {
    let k = r.k.map(|k| k.to_string()).unwrap_or_else(|| "k".into());
    let opt = |v: Option<f64>, none: &str| v.map(|v| format!("{v:.12}")).unwrap_or_else(|| none.to_string());
    let line = |label: String, value: String, note: &str| format!("  {label:<26} = {value}{note}\n");
    let mut s = format!("n = {}{}\n", r.n, r.k.map(|k| format!(", k = {k}")).unwrap_or_default());
    s += "expectations over n iid N(0,1):\n";
    s += &line("E|Z|".into(), format!("{:.12}", r.e_abs), "");
    s += &line("E[max_i |Z_i|]".into(), format!("{:.12}", r.e_max_abs), "");
    s += &line(format!("E[mean of top-{k} |Z_i|]"), opt(r.e_topk_mean_abs, "(give --k)"), "");
    s += "scale constants (C * stat estimates sigma):\n";
    s += &line("c_l1   = 1/E|Z|".into(), format!("{:.12}", r.c_l1), "");
    s += &line("c_inf  = 1/E[max|Z|]".into(), format!("{:.12}", r.c_inf), "   (exact)");
    s += &line(format!("c_topk = 1/E[top-{k} mean]"), opt(r.c_topk, "(give --k)"), "   (exact)");
    s += &line(
        "c_code = authors' c(n)".into(),
        opt(r.c_code, "undefined for n = 1"),
        "   (0.5(1+sqrt(pi ln 4))/sqrt(2 ln n), for L-inf and every k; biased)",
    );
    s
}

pub fn run(args: ConstantsArgs) -> Result<(), CliError> {
    let r = compute(args.n, args.k)?;
    if args.json {
        print_json(&r)
    } else {
        print(&render_text(&r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_the_library_values() {
        let r = compute(1024, Some(10)).unwrap();
        assert_eq!(r.c_inf, constants::c_inf(1024).unwrap());
        assert_eq!(r.c_topk, Some(constants::c_topk(1024, 10).unwrap()));
        assert_eq!(r.c_code, Some(constants::c_code(1024).unwrap()));
        // algorithms.md 4.2: E[max|Z|] at n = 1024 is 3.441870.
        assert!((r.e_max_abs - 3.441870).abs() < 1e-6);
        assert!((r.c_inf * r.e_max_abs - 1.0).abs() < 1e-15);
        let text = render_text(&r);
        assert!(text.contains("E[max_i |Z_i|]") && text.contains("c_code"), "{text}");
    }

    #[test]
    fn refuses_bad_n_and_k_naming_the_value() {
        let e = compute(0, None).unwrap_err().to_string();
        assert!(e.contains("'0'") && e.contains("--n"), "{e}");
        let e = compute(16, Some(17)).unwrap_err().to_string();
        assert!(e.contains("'17'") && e.contains("--k") && e.contains("16"), "{e}");
        let e = compute(16, Some(0)).unwrap_err().to_string();
        assert!(e.contains("'0'") && e.contains("--k"), "{e}");
        // n = 1 is valid; only the authors' c(n) is undefined there.
        let r = compute(1, Some(1)).unwrap();
        assert_eq!(r.c_code, None);
        assert!((r.e_max_abs - r.e_abs).abs() < 1e-12);
    }
}
