#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The Kubernetes sysext's tooling on this host: the pinned version agrees
# everywhere, OCI archives are reproducible and named for containerd, the
# release path takes only binaries matching their published SHA-256, and the
# node's sysext installer takes only an image matching the credential's
# digest. Downloads come from an HTTP server on this host's loopback.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/tests/lib.sh"
tmp=$(mktemp -d)
trap 'kill $server 2>/dev/null; rm -rf "$tmp"' EXIT

go_version=$(cd "$top/mkosi.images/kubernetes/source" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
image_version=$(sed -n 's/^ImageVersion=//p' "$top/mkosi.images/kubernetes/mkosi.conf")
pass_if "the sysext's ImageVersion ($image_version) is the pinned module's ($go_version)" \
    test "v$image_version" = "$go_version"

# --- OCI archives --------------------------------------------------------------
printf '#!/bin/sh\necho hi\n' >"$tmp/hello"
archive() { "$top/scripts/oci-archive" localhost/v6node/test:1 "$1" /hello "$tmp/hello" >/dev/null; }
reproducible() { archive "$tmp/a.tar" && sleep 1 && touch "$tmp/hello" && archive "$tmp/b.tar" && cmp "$tmp/a.tar" "$tmp/b.tar"; }
pass_if "oci-archive: the same input gives the same bytes" reproducible
named_for_containerd() {
    mkdir -p "$tmp/layout" && tar -xf "$tmp/a.tar" -C "$tmp/layout" &&
        jq -e '.manifests[0].annotations["io.containerd.image.name"] == "localhost/v6node/test:1"' "$tmp/layout/index.json" &&
        manifest=$(jq -r '.manifests[0].digest | sub("sha256:"; "")' "$tmp/layout/index.json") &&
        layer=$(jq -r '.layers[0].digest | sub("sha256:"; "")' "$tmp/layout/blobs/sha256/$manifest") &&
        tar -tvf "$tmp/layout/blobs/sha256/$layer" | grep -q '^-rwxr-xr-x 0/0 .* hello$' &&
        for blob in "$tmp"/layout/blobs/sha256/*; do
            [[ "$(sha256sum <"$blob" | cut -d' ' -f1)" == "${blob##*/}" ]] || return 1
        done
}
pass_if "oci-archive: named by io.containerd.image.name, blobs match their digests, entrypoint executable" named_for_containerd

# --- release binaries ----------------------------------------------------------
release=$tmp/www/release/$go_version/bin/linux/amd64
mkdir -p "$release"
for bin in kubelet kubeadm kubectl; do
    printf 'not really %s\n' "$bin" >"$release/$bin"
    sha256sum <"$release/$bin" | cut -d' ' -f1 >"$release/$bin.sha256"
done
python3 -m http.server 18631 --bind ::1 --directory "$tmp/www" >/dev/null 2>&1 &
server=$!
for _ in $(seq 50); do curl -sf -o /dev/null "http://[::1]:18631/" && break; sleep 0.1; done
fetch() { V6NODE_KUBERNETES_TREE=$tmp/tree "$top/scripts/build-kubernetes" --release "http://[::1]:18631/release" >"$tmp/fetch.log" 2>&1; }
release_taken() {
    fetch || { cat "$tmp/fetch.log"; return 1; }
    for bin in kubelet kubeadm kubectl; do cmp "$release/$bin" "$tmp/tree/usr/bin/$bin" || return 1; done
    test -f "$tmp/tree/usr/lib/v6node/images/pause.oci.tar"
}
pass_if "release binaries matching their .sha256 are staged (with the pause image)" release_taken
release_refused() {
    rm -rf "$tmp/tree"
    echo tampered >>"$release/kubectl"
    ! fetch && cat "$tmp/fetch.log" && grep -q 'kubectl .* does not match its published SHA-256' "$tmp/fetch.log" &&
        [[ ! -e "$tmp/tree/usr/bin/kubelet" ]]
}
pass_if "a binary not matching its .sha256 is refused, and nothing is staged" release_refused

# --- the node's sysext installer ----------------------------------------------
installer=$top/mkosi.extra/usr/libexec/v6node/extensions
printf 'a sysext image\n' >"$tmp/www/kubernetes.raw"
digest=sha256:$(sha256sum <"$tmp/www/kubernetes.raw" | cut -d' ' -f1)
install_with() { # install_with VALUE: the installer with v6node.sysext.kubernetes=VALUE
    mkdir -p "$tmp/creds" && printf '%s' "$1" >"$tmp/creds/v6node.sysext.kubernetes"
    CREDENTIALS_DIRECTORY=$tmp/creds V6NODE_EXTENSIONS_DIR=$tmp/extensions V6NODE_SYSEXT=true \
        "$installer" >"$tmp/install.log" 2>&1
}
refused_digest() {
    ! install_with "http://[::1]:18631/kubernetes.raw sha256:$(printf '1%.0s' $(seq 64))" && cat "$tmp/install.log" &&
        grep -q 'refused, nothing changed' "$tmp/install.log" && [[ -z "$(ls -A "$tmp/extensions" 2>/dev/null)" ]]
}
pass_if "installer: an image not matching the credential's digest is refused, nothing left" refused_digest
malformed_credential() {
    ! install_with "http://[::1]:18631/kubernetes.raw" && grep -q 'expected "URL sha256:<64 hex>"' "$tmp/install.log"
}
pass_if "installer: a credential without a digest is named and refused" malformed_credential
installed() {
    install_with "http://[::1]:18631/kubernetes.raw $digest" && cmp "$tmp/www/kubernetes.raw" "$tmp/extensions/kubernetes.raw" &&
        install_with "http://[::1]:18631/kubernetes.raw $digest" && grep -q 'is current' "$tmp/install.log"
}
pass_if "installer: a matching image is installed once, then left as it is" installed
handed_to_sysupdate() {
    # What systemd-sysupdate's kubernetes component writes.
    mkdir -p "$tmp/extensions/kubernetes.raw.v" && printf 'newer\n' >"$tmp/extensions/kubernetes.raw.v/kubernetes_1.36.4.raw"
    install_with "http://[::1]:18631/kubernetes.raw $digest" && cat "$tmp/install.log" &&
        grep -q 'systemd-sysupdate manages it now .*removed .*/kubernetes.raw$' "$tmp/install.log" &&
        grep -q 'credential v6node.sysext.kubernetes ignored' "$tmp/install.log" &&
        [[ ! -e "$tmp/extensions/kubernetes.raw" && -e "$tmp/extensions/kubernetes.raw.v/kubernetes_1.36.4.raw" ]]
}
pass_if "installer: once systemd-sysupdate's component holds versions, the credential's image goes" handed_to_sysupdate
tap_done
