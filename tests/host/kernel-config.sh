#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# kernel-config/check against synthetic kernel configs: what it accepts, what it
# names as missing, and how it treats bad input.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/tests/lib.sh"
check=$top/kernel-config/check
fragment=$top/kernel-config/v6node.config
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A config that meets the fragment exactly, for a given kernel version.
make_config() {
    echo "# Linux/x86 $1 Kernel Configuration"
    sed -n 's/^\(CONFIG_[A-Z0-9_]*=[ym]\)$/\1/p' "$fragment"
}
make_config 6.12.0 >"$tmp/complete"

expect() { # expect STATUS PATTERN COMMAND...: exit status and a line of output
    local status=$1 pattern=$2 out rc
    shift 2
    out=$("$@" 2>&1); rc=$?
    echo "$out"
    [[ $rc == "$status" ]] || { echo "exit $rc, want $status"; return 1; }
    grep -qE -- "$pattern" <<<"$out" || { echo "no line matching: $pattern"; return 1; }
}

pass_if "a config with every option passes" expect 0 '^all [0-9]+ requirements met' "$check" "$tmp/complete"

grep -v '^CONFIG_NETKIT=' "$tmp/complete" >"$tmp/no-netkit"
pass_if "a missing option is named with its reason" \
    expect 1 '^MISSING CONFIG_NETKIT=y \(have not set\): netkit, the pod device' "$check" "$tmp/no-netkit"

grep -v -e '^CONFIG_NETKIT=' -e '^CONFIG_BPF_SYSCALL=' "$tmp/complete" >"$tmp/two-missing"
pass_if "every missing option is named, not just the first" \
    sh -c '"$1" "$2" | grep -c ^MISSING | grep -qx 2' _ "$check" "$tmp/two-missing"

sed 's/^CONFIG_BPF_SYSCALL=y$/CONFIG_BPF_SYSCALL=m/' "$tmp/complete" >"$tmp/module-for-builtin"
pass_if "=m does not satisfy an option that must be built in" \
    expect 1 '^MISSING CONFIG_BPF_SYSCALL=y \(have m\)' "$check" "$tmp/module-for-builtin"

sed 's/^CONFIG_VETH=m$/CONFIG_VETH=y/' "$tmp/complete" >"$tmp/builtin-for-module"
pass_if "=y satisfies an option that may be a module" expect 0 'requirements met' "$check" "$tmp/builtin-for-module"

sed 's/^CONFIG_NETKIT=y$/# CONFIG_NETKIT is not set/' "$tmp/complete" >"$tmp/not-set"
pass_if "'is not set' counts as missing" expect 1 '^MISSING CONFIG_NETKIT=y' "$check" "$tmp/not-set"

make_config 6.6.30 >"$tmp/old"
pass_if "a kernel older than netkit (6.7) is named" expect 1 '^MISSING kernel >= 6\.7 \(config is for 6\.6\.30\)' "$check" "$tmp/old"

make_config 6.12.0 | gzip >"$tmp/complete.gz"
pass_if "a gzipped config (/proc/config.gz) is read" expect 0 'requirements met' "$check" "$tmp/complete.gz"

pass_if "an unreadable config is a usage error, not a pass" expect 2 'cannot read kernel config' "$check" "$tmp/absent"

printf '# reason\nCONFIG_FOO=maybe\n' >"$tmp/bad-fragment"
pass_if "a malformed fragment line is named" expect 2 'fragment line 2 not understood: CONFIG_FOO=maybe' "$check" -f "$tmp/bad-fragment" "$tmp/complete"

pass_if "every option in the fragment carries a reason" \
    sh -c '! "$1" /dev/null | grep -E "^MISSING CONFIG_[A-Z0-9_]+=[ym] \(have not set\): $"' _ "$check"

tap_done
