// SPDX-License-Identifier: Apache-2.0
//! Compiles the BPF entry objects in ../bpf with clang and leaves them in
//! OUT_DIR, where main.rs embeds them: the binary is the whole dataplane.

use std::{env, path::PathBuf, process::Command};

/// Entry objects, one per attach point family; each becomes `<name>.bpf.o`.
const OBJECTS: &[&str] = &["host"];

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let bpf = manifest.join("../bpf");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let clang = env::var("BPF_CLANG").unwrap_or_else(|_| "clang".into());
    println!("cargo:rerun-if-env-changed=BPF_CLANG");
    println!("cargo:rerun-if-changed={}", bpf.display());

    // -target bpf drops the host's multiarch include path, where Debian keeps
    // <asm/types.h>; add it back so the uapi headers resolve.
    let multiarch = Command::new("gcc")
        .arg("-print-multiarch")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("{}-linux-gnu", env::var("CARGO_CFG_TARGET_ARCH").unwrap()));

    for name in OBJECTS {
        let source = bpf.join(format!("{name}.bpf.c"));
        let object = out.join(format!("{name}.bpf.o"));
        let status = Command::new(&clang)
            .args(["-target", "bpf", "-O2", "-g", "-Wall", "-Werror"])
            .arg(format!("-I{}", bpf.join("include").display()))
            .arg(format!("-I{}", bpf.display()))
            .arg(format!("-I/usr/include/{multiarch}"))
            .arg("-c")
            .arg(&source)
            .arg("-o")
            .arg(&object)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {clang} (install clang and libbpf-dev): {e}"));
        assert!(status.success(), "{clang} failed on {}", source.display());
    }
}
