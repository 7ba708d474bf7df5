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

# listening NETNS tcp|udp PORT: wait up to 10 s until a socket in NETNS is
# bound to PORT. A server started in the background is there only then, and
# a slow machine takes longer than any fixed sleep to start one.
listening() {
    local kind=t
    [[ $2 == udp ]] && kind=u
    for _ in $(seq 100); do
        [[ -n "$(nsenter --net="/run/netns/$1" ss -Hnl$kind "sport = :$3")" ]] && return 0
        sleep 0.1
    done
    echo "nothing in $1 is bound to $2 port $3"
    return 1
}

tap_done() {
    echo "1..$tap_count"
    echo "$((tap_count - tap_failed)) passed, $tap_failed failed"
    ((tap_failed == 0))
}
