// SPDX-License-Identifier: Apache-2.0
//! Generates the types and gRPC services of Hubble's API from proto/.

use std::path::PathBuf;

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("proto");
    let files = ["observer/observer.proto", "peer/peer.proto"];
    println!("cargo:rerun-if-changed={}", root.display());
    let descriptors =
        protox::compile(files, [&root]).unwrap_or_else(|e| panic!("compiling Hubble's protos in {}: {e:?}", root.display()));
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)
        .unwrap_or_else(|e| panic!("generating Hubble's API: {e}"));
}
