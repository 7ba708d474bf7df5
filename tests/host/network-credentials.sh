#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# v6node-network-credentials on this host, in a network namespace of its own
# (as its unit runs): which credentials make a networkd file, and which are
# rejected, with a message naming the credential, leaving SLAAC in charge.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/tests/lib.sh"
script=$top/mkosi.extra/usr/libexec/v6node/network-credentials
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run_with KEY=VALUE...: runs the script with these credentials; leaves its
# output in $tmp/log and the generated file (if any) in $tmp/out.
run_with() {
    rm -rf "$tmp/creds" "$tmp/out" && mkdir -p "$tmp/creds" "$tmp/out"
    local kv
    for kv in "$@"; do printf '%s' "${kv#*=}" >"$tmp/creds/v6node.network.${kv%%=*}"; done
    CREDENTIALS_DIRECTORY=$tmp/creds V6NODE_NETWORK_DIR=$tmp/out \
        unshare --net "$script" >"$tmp/log" 2>&1
}
generated=$tmp/out/10-v6node-static.network

accepts() { # accepts LINE... -- KEY=VALUE...
    local want=()
    while [[ $1 != -- ]]; do want+=("$1"); shift; done
    shift
    run_with "$@" || { echo "exit status $?"; cat "$tmp/log"; return 1; }
    [[ -f "$generated" ]] || { echo "no file written"; cat "$tmp/log"; return 1; }
    local line
    for line in "${want[@]}"; do
        grep -qxF -- "$line" "$generated" || { echo "missing line '$line' in:"; cat "$generated"; return 1; }
    done
}

rejects() { # rejects PATTERN KEY=VALUE...
    local pattern=$1
    shift
    run_with "$@" || { echo "exit status $? (must never fail the boot)"; return 1; }
    [[ ! -e "$generated" ]] || { echo "wrote a file for bad input:"; cat "$generated"; return 1; }
    grep -qE -- "$pattern" "$tmp/log" || { echo "log does not match '$pattern':"; cat "$tmp/log"; return 1; }
    grep -q 'falls back to SLAAC' "$tmp/log" || { cat "$tmp/log"; return 1; }
}

run_with; pass_if "no credentials: message says SLAAC" grep -q 'uses SLAAC' "$tmp/log"
pass_if "no credentials: no file" test ! -e "$generated"

pass_if "address, gateway, DNS make a static uplink" \
    accepts 'Address=2001:db8:1::10/64' 'Gateway=2001:db8:1::1' 'DNS=2001:db8::53' 'DNS=2001:db8::54' \
    'Type=ether' 'Kind=!*' 'IPv6AcceptRA=no' -- \
    address=2001:db8:1::10/64 gateway=2001:db8:1::1 dns='2001:db8::53 2001:db8::54'
pass_if "a link-local gateway is accepted" accepts 'Gateway=fe80::1' -- address=2001:db8:1::10/64 gateway=fe80::1
pass_if "a trailing newline in a credential file is fine" accepts 'Address=2001:db8:1::10/64' -- $'address=2001:db8:1::10/64\n'
pass_if "interface selects the uplink by name" accepts 'Name=enp1s0' -- address=2001:db8:1::10/64 interface=enp1s0

pass_if "address without prefix length" rejects "v6node.network.address='2001:db8::10' has no prefix length" address=2001:db8::10
pass_if "IPv4 address" rejects "v6node.network.address='192.0.2.10/24' is not a usable IPv6 address" address=192.0.2.10/24
pass_if "not an address" rejects "v6node.network.address='2001:db8::zz/64' is not a usable IPv6 address" address=2001:db8::zz/64
pass_if "prefix length over 128" rejects "v6node.network.address='2001:db8::1/129'" address=2001:db8::1/129
pass_if "multicast address" rejects "v6node.network.address='ff02::1/64'" address=ff02::1/64
pass_if "injected networkd keys" rejects "v6node.network.address=.*is not a usable" $'address=2001:db8::1/64\nDNS=192.0.2.1'
pass_if "gateway that is not an address" rejects "v6node.network.gateway='router' is not a usable IPv6 gateway" address=2001:db8::1/64 gateway=router
pass_if "gateway given as a prefix" rejects "v6node.network.gateway='2001:db8::1/64' must be an address" address=2001:db8::10/64 gateway=2001:db8::1/64
pass_if "one bad DNS server among good ones" rejects "v6node.network.dns entry '8.8.8.8' is not an IPv6 address" address=2001:db8::1/64 dns='2001:db8::53 8.8.8.8'
pass_if "gateway without address" rejects "v6node.network.address is required" gateway=fe80::1
pass_if "interface name with shell or unit syntax" rejects "v6node.network.interface='eth0 Kind=veth'" address=2001:db8::1/64 'interface=eth0 Kind=veth'

tap_done
