//! The test drivers' compile cache (`common::compile_cxx`): a program is reused only when the
//! compiler, the arguments and the preprocessed source are the same, so that a cached program
//! can never stand in for changed code.

use crate::common;

use common::{compile_cxx, CxxJob};

const SRC: &str = "tests/planted/planted.cu";

#[test]
fn a_program_is_reused_for_the_same_inputs() {
    // A name of its own: a test building the same name at the same time would replace the file.
    let p = compile_cxx(SRC, "cxx_cache_reuse", &["-O0"]);
    assert_eq!(p, CxxJob::new(SRC, &["-O0"]).cached_path("cxx_cache_reuse"));
    let built = std::fs::metadata(&p).unwrap().modified().unwrap();
    assert_eq!(compile_cxx(SRC, "cxx_cache_reuse", &["-O0"]), p);
    assert_eq!(std::fs::metadata(&p).unwrap().modified().unwrap(), built, "{} was built again", p.display());
}

#[test]
fn flags_and_code_change_the_cached_name_and_comments_do_not() {
    let base = CxxJob::new(SRC, &["-O1"]).cached_path("probe");
    // A flag that changes the preprocessed text, and one that changes only the code generated
    // (-O1 and -O2 define the same macros).
    assert_ne!(CxxJob::new(SRC, &["-O1", "-DNORMLAB_PROBE=1"]).cached_path("probe"), base);
    assert_ne!(CxxJob::new(SRC, &["-O2"]).cached_path("probe"), base);

    // A copy of the source, edited: a comment leaves the preprocessed text (and the name) as
    // it was, a declaration does not.
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cxx_cache_probe");
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("probe.cu");
    let copy_str = copy.to_str().unwrap();
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(SRC)).unwrap();
    let name_of = |edit: &str| {
        std::fs::write(&copy, format!("{text}{edit}")).unwrap();
        CxxJob::new(copy_str, &["-O1"]).cached_path("probe")
    };
    let plain = name_of("");
    assert_eq!(name_of("\n// a comment\n"), plain);
    assert_ne!(name_of("\nstatic int normlab_probe = 1;\n"), plain);
}
