# SPDX-License-Identifier: Apache-2.0
# TAP helpers for the test scripts: each prints "ok N - ..." / "not ok N - ..."
# and finishes with "N passed, N failed".
tap_count=0
tap_failed=0

# With TAP_VERBOSE set, the first lines of a passing test's output are shown
# too (the boot tests record what they saw).
TAP_VERBOSE=${TAP_VERBOSE:-}

# pass_if DESCRIPTION COMMAND...: one test; the command's output is shown
# as TAP comments when it fails.
pass_if() {
    local desc=$1 out
    shift
    tap_count=$((tap_count + 1))
    if out=$("$@" 2>&1); then
        echo "ok $tap_count - $desc"
        [[ -z "$TAP_VERBOSE" || -z "$out" ]] || printf '%s\n' "$out" | sed 's/^/#   /' | head -5
    else
        tap_failed=$((tap_failed + 1))
        echo "not ok $tap_count - $desc"
        printf '%s\n' "$out" | sed 's/^/#   /' | head -30
    fi
}

# retry SECONDS COMMAND...: until the command succeeds, once a second, for
# state that settles (a network after boot, a node joining).
retry() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 1
    done
}

tap_done() {
    echo "1..$tap_count"
    echo "$((tap_count - tap_failed)) passed, $tap_failed failed"
    ((tap_failed == 0))
}
