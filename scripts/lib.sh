# SPDX-License-Identifier: Apache-2.0
# Shared by the build and test scripts: paths, the mkosi pin, and how to find
# the Debian archive this machine is configured to use.

# The pinned mkosi: trixie's package, checked by hash.
MKOSI_VERSION=25.3
MKOSI_DEB_VERSION=25.3-7
MKOSI_DEB_SHA256=ef56c81324fd47d65490e944ec4697bb3f6fb21326d0d071bfc2fb5ba5383252

V6NODE_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Survives a fresh clone on the same machine: mkosi itself, its package cache
# and its tools tree.
V6NODE_CACHE=${V6NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/v6node}
MKOSI_DIR=$V6NODE_CACHE/mkosi-$MKOSI_DEB_VERSION

log() { printf '%s: %s\n' "$(basename "$0")" "$*" >&2; }
die() { log "error: $*"; exit 1; }
as_root() { if ((EUID == 0)); then "$@"; else sudo "$@"; fi; }

run_mkosi() {
    # The system interpreter, which Debian packages mkosi for; a pyenv or
    # virtualenv python3 earlier in PATH is not.
    PYTHONPATH="$MKOSI_DIR/usr/lib/python3/dist-packages" /usr/bin/python3 -m mkosi "$@"
}

# The disk image the last build wrote (mkosi.conf: Output=%i_%v).
built_image() {
    local images=("$V6NODE_TOP"/mkosi.output/v6node_*.raw)
    [[ -e "${images[0]}" ]] || die "no image in mkosi.output/; run make image"
    echo "${images[0]}"
}

mkosi_version_ok() {
    [[ "$(run_mkosi --version 2>/dev/null)" == "mkosi $MKOSI_VERSION"* ]]
}

# Prints the URI of the host's Debian archive whose apt Label is $1 (Debian or
# Debian-Security), as the host's apt configuration names it. Mirrors keep the
# Release file's Origin and Label, so this finds them whatever their name.
# Before the host's first apt-get update there is no Release data: then the
# archive is the one serving a Debian host's own suite (or suite-security).
host_debian_uri() {
    local label=$1 uri suite codename id
    uri=$(apt-get indextargets --format '$(ORIGIN)|$(LABEL)|$(REPO_URI)' 2>/dev/null |
        awk -F'|' -v label="$label" '$1 == "Debian" && $2 == label { print $3; exit }')
    if [[ -z "$uri" ]]; then
        id=$(. /etc/os-release && echo "$ID") codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
        [[ "$id" == debian && -n "$codename" ]] || return 0
        suite=$codename
        [[ "$label" != Debian-Security ]] || suite=$codename-security
        uri=$(apt-get indextargets --no-release-info --format '$(RELEASE)|$(REPO_URI)' 2>/dev/null |
            awk -F'|' -v suite="$suite" '$1 == suite { print $2; exit }')
    fi
    echo "$uri"
}

# Writes deb822 sources for Debian trixie from the host's archive, or from
# V6NODE_DEBIAN_MIRROR / V6NODE_DEBIAN_SECURITY_MIRROR when set (an Ubuntu host,
# an air gap). Returns 1 when neither names an archive.
write_trixie_sources() {
    local out=$1 main security
    main=${V6NODE_DEBIAN_MIRROR:-$(host_debian_uri Debian)}
    security=${V6NODE_DEBIAN_SECURITY_MIRROR:-$(host_debian_uri Debian-Security)}
    [[ -n "$main" ]] || { log "no Debian archive in this host's apt sources; set V6NODE_DEBIAN_MIRROR"; return 1; }
    mkdir -p "$(dirname "$out")"
    {
        printf 'Types: deb\nURIs: %s\nSuites: trixie trixie-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$main"
        if [[ -n "$security" ]]; then
            printf '\nTypes: deb\nURIs: %s\nSuites: trixie-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$security"
        fi
    } >"$out"
}

# hubble_tls DIR NODE...: the mutual TLS between Hubble Relay and v6node
# nodes, in DIR: a CA (ca.crt), each NODE's server certificate and key
# (NODE.crt, NODE.key) under the names Relay checks (Cilium's:
# NODE.default.hubble-grpc.cilium.io, and hubble-peer.default.hubble-grpc
# .cilium.io for the Peer service), and Relay's client certificate
# (hubble-relay.crt, .key). For test clusters: 30 days, keys unencrypted.
hubble_tls() {
    local dir=$1 node
    shift
    mkdir -p "$dir"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
        -subj "/CN=v6node test Hubble CA" -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null || return 1
    hubble_tls_issue() { # hubble_tls_issue DIR NAME SUBJECT_ALT_NAMES EXTENDED_KEY_USAGE
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$2" \
            -keyout "$1/$2.key" -out "$1/$2.csr" 2>/dev/null &&
            openssl x509 -req -in "$1/$2.csr" -CA "$1/ca.crt" -CAkey "$1/ca.key" -CAcreateserial -days 30 \
                -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=%s\n' "$3" "$4") -out "$1/$2.crt" 2>/dev/null
    }
    for node in "$@"; do
        hubble_tls_issue "$dir" "$node" \
            "DNS:${node//./-}.default.hubble-grpc.cilium.io,DNS:hubble-peer.default.hubble-grpc.cilium.io" serverAuth || return 1
    done
    hubble_tls_issue "$dir" hubble-relay DNS:hubble-relay.default.hubble-grpc.cilium.io clientAuth
}
