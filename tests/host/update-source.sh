#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The update source (mkosi.extra/usr/libexec/v6node/update-source): the
# transfer definitions it writes for systemd-sysupdate from the credential or
# the config file, the signature check it turns on, and bad input refused
# without losing the source in force. tests/image/update-test runs it on a node.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/tests/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/creds"
export V6NODE_SYSUPDATE_TEMPLATES=$top/mkosi.extra/usr/lib/v6node
# The node's boot disk, as update-source finds it on a node (the root partition's disk).
export V6NODE_BOOT_DISK=/dev/disk/by-diskseq/7
export V6NODE_SYSUPDATE_DIR=$tmp/run V6NODE_SYSUPDATE_KEYRING=$tmp/pubring.gpg V6NODE_UPDATE_URL_FILE=$tmp/update.url
source_cmd() { CREDENTIALS_DIRECTORY=$tmp/creds "$top/mkosi.extra/usr/libexec/v6node/update-source"; }
# sources: the distinct Path= and Verify= lines of the written transfers.
sources() { cat "$tmp/run"/sysupdate*.d/*.transfer 2>/dev/null | grep -E '^(Path=http|Verify=)' | sort -u | paste -sd' '; }
expect() { # expect STATUS SOURCES LOG_PATTERN
    local out rc
    out=$(source_cmd 2>&1); rc=$?
    echo "$out"; echo "written: $(sources)"
    [[ $rc == "$1" && "$(sources)" == "$2" ]] && grep -qE -- "$3" <<<"$out"
}

pass_if "no source: no transfers, and it says so" expect 0 '' 'no update source .*takes no updates'

echo 'https://updates.example.internal/v6node' >"$tmp/creds/v6node.update.url"
pass_if "the credential: every transfer reads from it (a / appended), unsigned" \
    expect 0 'Path=https://updates.example.internal/v6node/ Verify=no' 'credential v6node.update.url.*unsigned'
# transfers DIR: each sysupdate*.d/NAME.transfer under DIR, one per line.
transfers() { (cd "$1" && ls -d sysupdate*.d/*.transfer); }
pass_if "one transfer per template: the OS's (/usr, verity, UKI) and the kubernetes component's" \
    test "$(transfers "$tmp/run" | paste -sd' ')" = "$(transfers "$V6NODE_SYSUPDATE_TEMPLATES" | paste -sd' ')"
pass_if "the /usr slots' transfers name the boot disk, not Path=auto (which a merged sysext breaks)" \
    bash -c "grep -qx 'Path=/dev/disk/by-diskseq/7' $tmp/run/sysupdate.d/10-usr.transfer && grep -qx 'Path=/dev/disk/by-diskseq/7' $tmp/run/sysupdate.d/11-usr-verity.transfer"
pass_if "the kubernetes component reads from the same server" \
    grep -qx 'Path=https://updates.example.internal/v6node/' "$tmp/run/sysupdate.kubernetes.d/10-kubernetes.transfer"

echo 'not a keyring, but present' >"$tmp/pubring.gpg"
pass_if "a keyring turns on the signature check (Verify=yes)" \
    expect 0 'Path=https://updates.example.internal/v6node/ Verify=yes' 'its signature checked'
rm "$tmp/pubring.gpg"

printf '# where this site publishes v6node\n\nhttp://[fd00:a::1]:8000/v6node/\n' >"$tmp/update.url"
pass_if "the admin's file in /etc wins over the credential: its first line not a comment" \
    expect 0 'Path=http://[fd00:a::1]:8000/v6node/ Verify=no' "\\($tmp/update.url\\)"

for bad in 'ftp://mirror/v6node/' 'updates.example.internal' 'http://host/a|b'; do
    echo "$bad" >"$tmp/update.url"
    pass_if "a bad URL ($bad) is named and the source in force stays" \
        expect 1 'Path=http://[fd00:a::1]:8000/v6node/ Verify=no' 'is not an http:// or https:// URL; the update source stays'
done

rm "$tmp/update.url"
pass_if "the file removed: the credential again" \
    expect 0 'Path=https://updates.example.internal/v6node/ Verify=no' 'credential v6node.update.url'
rm "$tmp/creds/v6node.update.url"
pass_if "both removed: no transfers again" expect 0 '' 'no update source'
tap_done
