//! Regression: a channel of f32 subnormals (largest 3e-39) is rescaled by 2^128 for its
//! statistics; undoing that in the backward must not use the single factor 2^128, which is inf
//! in f32. The true gradients here are about 1e35: finite, so any inf or NaN is the bug.

use normlab_norms::batch::{self, Layout, Mode};
use normlab_norms::{Accum, NormSpec, RowStats};

#[test]
fn subnormal_channel_backward_is_finite_and_matches_row_form() {
    // NC layout, n = 6 samples, c = 1 channel: the channel is the whole input.
    let x: Vec<f32> = [1.0e-39f32, -2.0e-39, 3.0e-39, 0.5e-39, -1.5e-39, 2.5e-39].to_vec();
    let dy: Vec<f32> = [3e-4f32, -1e-4, 0.0, 2e-4, -4e-4, 5e-5].to_vec();
    for spec in [NormSpec::rms(0.0), NormSpec::unit_l2(0.0), NormSpec::layer(0.0), NormSpec::l1(0.0)] {
        let layout = Layout::Nc { n: 6, c: 1 };
        let mut y = vec![0f32; 6];
        let mut st = vec![RowStats::default(); 1];
        batch::forward(&spec, Accum::F32, layout, &x, None, None, &mut y, Mode::Train, None, Some(&mut st)).unwrap();
        assert!(y.iter().all(|v| v.is_finite()), "{spec:?}: forward {y:?}");
        let mut dx = vec![0f32; 6];
        batch::backward(&spec, Accum::F32, layout, &x, &dy, Mode::Train, &st, None, &mut dx, None, None).unwrap();
        assert!(dx.iter().all(|v| v.is_finite()), "{spec:?}: backward {dx:?}");
        // Same numbers as the row form over the same 6 values.
        let mut yr = vec![0f32; 6];
        let mut sr = vec![RowStats::default(); 1];
        normlab_norms::row::forward(&spec, Accum::F32, &x, 6, None, None, &mut yr, Some(&mut sr)).unwrap();
        let mut dxr = vec![0f32; 6];
        normlab_norms::row::backward(&spec, Accum::F32, &x, &dy, 6, &sr, None, &mut dxr, None, None).unwrap();
        assert_eq!(y, yr, "{spec:?}");
        assert_eq!(dx, dxr, "{spec:?}");
    }
}
