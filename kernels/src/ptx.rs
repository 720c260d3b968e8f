//! Reading NVRTC's PTX for what the tests check of the compiled kernels: each entry's
//! parameter struct, whose size and alignment must be those of the `#[repr(C)]` Rust struct
//! the launcher passes (a mismatch would hand the kernel garbage, silently).

use std::collections::BTreeMap;

/// Each `.entry`'s text by entry name: from just after `.entry ` (the name, its parameters,
/// its body) to the next entry.
pub fn entries(ptx: &str) -> BTreeMap<String, &str> {
    ptx.split(".entry ")
        .skip(1)
        .map(|part| (part.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect(), part))
        .collect()
}

/// Each `.entry`'s parameter as (alignment, size) in bytes, by entry name, from
/// `.entry <name>(.param .align A .b8 <name>_param_0[S])`. Every kernel takes exactly one
/// parameter struct: an entry with none, several, or an unreadable one is an error naming it.
pub fn entry_params(ptx: &str) -> Result<BTreeMap<String, (usize, usize)>, String> {
    let mut out = BTreeMap::new();
    for (name, part) in entries(ptx) {
        let header = &part[..part.find(')').unwrap_or(part.len())];
        let count = header.matches(".param").count();
        if count != 1 {
            return Err(format!("{name}: {count} parameters, kernels take exactly one struct: {header}"));
        }
        let align = header.split(".align ").nth(1).and_then(|s| s.split_whitespace().next()).and_then(|s| s.parse().ok());
        let size = header.rsplit('[').next().and_then(|s| s.split(']').next()).and_then(|s| s.parse().ok());
        match (align, size) {
            (Some(a), Some(s)) => out.insert(name, (a, s)),
            _ => return Err(format!("{name}: no `.align A .b8 p[S]` parameter: {header}")),
        };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::entry_params;

    #[test]
    fn reads_align_and_size_and_refuses_odd_entries() {
        let ptx = ".visible .entry nl_a(\n\t.param .align 8 .b8 nl_a_param_0[48]\n)\n{ ret; }\n\
                   .visible .entry nl_b(\n\t.param .align 16 .b8 nl_b_param_0[112]\n)\n{ ret; }\n";
        let got = entry_params(ptx).unwrap();
        assert_eq!(got.into_iter().collect::<Vec<_>>(), [("nl_a".to_string(), (8, 48)), ("nl_b".to_string(), (16, 112))]);
        let two = ".entry nl_c(\n.param .u64 nl_c_param_0,\n.param .u64 nl_c_param_1\n)\n";
        assert!(entry_params(two).unwrap_err().starts_with("nl_c: 2 parameters"));
        let scalar = ".entry nl_d(\n.param .u64 nl_d_param_0\n)\n";
        assert!(entry_params(scalar).unwrap_err().starts_with("nl_d: no `.align"));
    }
}
