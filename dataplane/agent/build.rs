// SPDX-License-Identifier: Apache-2.0
//! Compiles the BPF entry objects in ../bpf (with ../bpf/cc, which tests use
//! too) and leaves them in OUT_DIR, where bpf.rs embeds them: the binary is
//! the whole dataplane.

use std::{env, path::PathBuf, process::Command};

/// Entry objects, one per attach point family; each becomes `<name>.bpf.o`.
const OBJECTS: &[&str] = &["host", "nat64", "pod"];

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let bpf = manifest.join("../bpf");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-env-changed=BPF_CLANG");
    println!("cargo:rerun-if-changed={}", bpf.display());

    for name in OBJECTS {
        let source = bpf.join(format!("{name}.bpf.c"));
        let object = out.join(format!("{name}.bpf.o"));
        let status = Command::new("sh")
            .arg(bpf.join("cc"))
            .arg(&source)
            .arg(&object)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {}/cc: {e}", bpf.display()));
        assert!(
            status.success(),
            "compiling {} failed (needs clang, libbpf-dev, linux-libc-dev: scripts/setup-host)",
            source.display()
        );
    }
}
