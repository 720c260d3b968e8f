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

/// Run `f` `warmup` times untimed, then `reps` times timed, appending the times to `times`:
/// one round of a measurement spread over several (see `run`). The first error stops it.
pub fn sample<E>(warmup: usize, reps: usize, times: &mut Vec<f64>, mut f: impl FnMut() -> Result<(), E>) -> Result<(), E> {
    for _ in 0..warmup {
        f()?;
    }
    for _ in 0..reps {
        let t0 = Instant::now();
        f()?;
        times.push(t0.elapsed().as_secs_f64());
    }
    Ok(())
}

/// The timed runs of round `round` (0-based) when `reps` runs are spread over `rounds` rounds:
/// as even as possible, the first `reps % rounds` rounds one more.
pub fn reps_in_round(reps: usize, rounds: usize, round: usize) -> usize {
    reps / rounds + usize::from(round < reps % rounds)
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
    fn rounds_share_the_runs() {
        for (reps, rounds) in [(10, 5), (10, 3), (7, 7), (3, 1), (11, 4)] {
            let shares: Vec<usize> = (0..rounds).map(|r| reps_in_round(reps, rounds, r)).collect();
            assert_eq!(shares.iter().sum::<usize>(), reps, "{reps} in {rounds}: {shares:?}");
            assert!(shares.iter().max().unwrap() - shares.iter().min().unwrap() <= 1, "{shares:?}");
            assert!(shares.iter().all(|&s| s >= 1), "{shares:?}");
        }
    }

    #[test]
    fn sample_appends_and_stops_on_error() {
        let mut times = vec![1.0];
        let mut calls = 0;
        sample::<()>(1, 3, &mut times, || {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!((calls, times.len(), times[0]), (4, 4, 1.0));
        let r = sample(0, 3, &mut times, || Err("boom"));
        assert_eq!((r, times.len()), (Err("boom"), 4));
    }

    #[test]
    fn counts_calls_and_stops_on_error() {
        let mut calls = 0;
        let mut times = Vec::new();
        sample::<()>(2, 5, &mut times, || {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!((calls, summarize(&mut times).reps), (7, 5));
        let mut calls = 0;
        let r = sample(1, 5, &mut Vec::new(), || {
            calls += 1;
            if calls == 3 { Err("boom") } else { Ok(()) }
        });
        assert_eq!((r, calls), (Err("boom"), 3));
    }
}
