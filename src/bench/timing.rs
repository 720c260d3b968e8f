//! Median-of-R timing. The median (not the mean) so that one run disturbed by page faults or
//! another process does not move the result; the minimum and maximum are kept to show spread.

use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Timing {
    pub median_s: f64,
    pub min_s: f64,
    pub max_s: f64,
    pub reps: usize,
}

/// Run `f` `warmup` times untimed, then `reps` times timed (at least once). The first error
/// stops the measurement.
pub fn measure<E>(warmup: usize, reps: usize, mut f: impl FnMut() -> Result<(), E>) -> Result<Timing, E> {
    for _ in 0..warmup {
        f()?;
    }
    let reps = reps.max(1);
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t0 = Instant::now();
        f()?;
        times.push(t0.elapsed().as_secs_f64());
    }
    Ok(summarize(&mut times))
}

/// Median (mean of the two middle values for an even count), min and max of `times`.
pub fn summarize(times: &mut [f64]) -> Timing {
    times.sort_by(f64::total_cmp);
    let m = times.len();
    let median_s = if m % 2 == 1 { times[m / 2] } else { 0.5 * (times[m / 2 - 1] + times[m / 2]) };
    Timing { median_s, min_s: times[0], max_s: times[m - 1], reps: m }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_and_even() {
        let t = summarize(&mut [3.0, 1.0, 2.0]);
        assert_eq!((t.median_s, t.min_s, t.max_s, t.reps), (2.0, 1.0, 3.0, 3));
        let t = summarize(&mut [4.0, 1.0, 3.0, 2.0]);
        assert_eq!(t.median_s, 2.5);
    }

    #[test]
    fn counts_calls_and_stops_on_error() {
        let mut calls = 0;
        let t = measure::<()>(2, 5, || {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!((calls, t.reps), (7, 5));
        let mut calls = 0;
        let r = measure(1, 5, || {
            calls += 1;
            if calls == 3 { Err("boom") } else { Ok(()) }
        });
        assert_eq!((r, calls), (Err("boom"), 3));
    }
}
