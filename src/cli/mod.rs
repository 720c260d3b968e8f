//! The `normlab` command line.
