//! The norms of `normlab-norms` as candle ops with autograd.
