// SPDX-License-Identifier: Apache-2.0
//! Generates the Rust mirror of bpf/include/v6node/abi.h, so the C header stays
//! the single definition of every map key, value and drop reason.

use std::{env, path::PathBuf};

fn main() {
    let header = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bpf/include/v6node/abi.h");
    println!("cargo:rerun-if-changed={}", header.display());

    let bindings = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .allowlist_type("v6n_.*")
        .allowlist_var("V6N_.*")
        .rustified_enum("v6n_reason")
        .rustified_enum("v6n_direction")
        .rustified_enum("v6n_policy_direction")
        .rustified_enum("v6n_event_kind")
        // Evaluates macros built of enum constants (V6N_REASONS_FORWARDING)
        // with clang itself.
        .clang_macro_fallback()
        .derive_default(true)
        .derive_eq(true)
        .derive_hash(true)
        .layout_tests(true)
        .generate()
        .unwrap_or_else(|e| panic!("bindgen failed on {}: {e}", header.display()));

    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("abi.rs");
    bindings.write_to_file(&out).expect("write abi.rs");
}
