// SPDX-License-Identifier: Apache-2.0
//! Compiles every BPF entry object in ../bpf (`<name>.bpf.c`, with ../bpf/cc,
//! which tests use too) into OUT_DIR and writes `embedded.rs`, which bpf.rs
//! includes: the binary is the whole dataplane. No list of objects here:
//! bpf.rs describes each one, and its tests check the two agree.

use std::{env, fmt::Write as _, fs, path::PathBuf, process::Command};

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let bpf = manifest.join("../bpf");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-env-changed=BPF_CLANG");
    println!("cargo:rerun-if-changed={}", bpf.display());

    let mut names: Vec<String> = fs::read_dir(&bpf)
        .unwrap_or_else(|e| panic!("reading {}: {e}", bpf.display()))
        .map(|entry| entry.expect("reading ../bpf").file_name().to_string_lossy().into_owned())
        .filter_map(|file| file.strip_suffix(".bpf.c").map(str::to_owned))
        .collect();
    names.sort();

    let mut embedded = String::from("/// (name, object) for every `../bpf/<name>.bpf.c`, by name; written by build.rs.\n");
    embedded.push_str("pub static EMBEDDED: &[(&str, &[u8])] = &[\n");
    for name in &names {
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
        writeln!(embedded, "    ({name:?}, aya::include_bytes_aligned!(concat!(env!(\"OUT_DIR\"), \"/{name}.bpf.o\"))),")
            .unwrap();
    }
    embedded.push_str("];\n");
    fs::write(out.join("embedded.rs"), embedded).expect("writing embedded.rs");
}
