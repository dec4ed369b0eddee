#!/usr/bin/env bash
# Runs a command under a memory limit (page cache included, as the kernel charges it to the cgroup), after dropping
# the page cache, and reports the peak memory of the run. The command's own stdout/stderr pass through unchanged;
# the last stdout line is a JSON summary ("tool":"memlimit"). Exits with the command's exit status (137 = OOM-killed).
#
# usage: memlimit.sh [--limit 8G] [--keep-cache] -- COMMAND [ARGS...]
#   --limit       bytes, or with a K/M/G suffix (powers of 1024); default 8G
#   --keep-cache  do not drop the page cache first (then file pages already cached count for nothing)
#
# Mechanism, first that works: cgroup v1 memory controller (a child of this shell's own memory cgroup; limit
# memory.limit_in_bytes, peak memory.max_usage_in_bytes), cgroup v2 (memory.max, peak memory.peak), systemd-run
# --scope -p MemoryMax (peak not available there).
set -euo pipefail

limit_text=8G
drop_cache=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        --limit) limit_text="$2"; shift 2 ;;
        --keep-cache) drop_cache=0; shift ;;
        --) shift; break ;;
        -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
        *) break ;;
    esac
done
if [[ $# -eq 0 ]]; then
    echo "memlimit.sh: no command given (usage: memlimit.sh [--limit 8G] -- COMMAND ...)" >&2
    exit 2
fi

to_bytes() {
    local text="$1" number unit
    if ! [[ "$text" =~ ^([0-9]+)([KkMmGg]?)$ ]]; then
        echo "memlimit.sh: --limit '$text' is not a number of bytes with an optional K/M/G suffix" >&2
        exit 2
    fi
    number="${BASH_REMATCH[1]}"
    unit="${BASH_REMATCH[2],,}"
    case "$unit" in
        k) echo $((number << 10)) ;;
        m) echo $((number << 20)) ;;
        g) echo $((number << 30)) ;;
        *) echo "$number" ;;
    esac
}
limit_bytes="$(to_bytes "$limit_text")"

cache_dropped=false
if [[ "$drop_cache" -eq 1 ]]; then
    sync
    if { echo 3 > /proc/sys/vm/drop_caches; } 2> /dev/null; then
        cache_dropped=true
    else
        echo "memlimit.sh: cannot write /proc/sys/vm/drop_caches; files may already be cached" >&2
    fi
fi

# Mount point of a cgroup v1 hierarchy holding the memory controller, if any.
v1_memory_mount() {
    awk '$3 == "cgroup" && $4 ~ /(^|,)memory(,|$)/ { print $2; exit }' /proc/self/mounts
}
v2_mount() {
    awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts
}

group=""
mechanism=""
make_v1_group() {
    local mount path swap_kib
    mount="$(v1_memory_mount)"
    [[ -n "$mount" ]] || return 1
    path="$(awk -F: '$2 ~ /(^|,)memory(,|$)/ { print $3; exit }' /proc/self/cgroup)"
    group="$mount${path%/}/diskformer-memlimit-$$"
    mkdir "$group" 2> /dev/null || return 1
    if ! echo "$limit_bytes" > "$group/memory.limit_in_bytes"; then
        rmdir "$group"
        return 1
    fi
    # With swap present, cap memory+swap too so the limit is a limit on RAM. Only then: setting it also stops
    # memory.failcnt from counting (seen on kernel 6.18), and without swap it changes nothing.
    swap_kib="$(awk '$1 == "SwapTotal:" { print $2 }' /proc/meminfo)"
    if [[ "$swap_kib" != 0 && -w "$group/memory.memsw.limit_in_bytes" ]]; then
        echo "$limit_bytes" > "$group/memory.memsw.limit_in_bytes" || true
    fi
    mechanism=cgroup-v1
}
make_v2_group() {
    local mount path swap_kib
    mount="$(v2_mount)"
    [[ -n "$mount" ]] || return 1
    path="$(awk -F: '$1 == "0" { print $3; exit }' /proc/self/cgroup)"
    [[ -n "$path" ]] || return 1
    grep -qw memory "$mount${path%/}/cgroup.subtree_control" 2> /dev/null || return 1
    group="$mount${path%/}/diskformer-memlimit-$$"
    mkdir "$group" 2> /dev/null || return 1
    if ! echo "$limit_bytes" > "$group/memory.max"; then
        rmdir "$group"
        return 1
    fi
    echo 0 > "$group/memory.swap.max" 2> /dev/null || true
    mechanism=cgroup-v2
}

read_file() { cat "$1" 2> /dev/null || echo null; }
# One value of a "key value" stats file (memory.stat, memory.events, memory.oom_control), null when absent.
stat_value() { awk -v key="$2" '$1 == key { print $2; found = 1 } END { if (!found) print "null" }' "$1" 2> /dev/null; }

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    [[ -n "$group" && -d "$group" ]] || return 0
    if [[ -s "$group/cgroup.procs" ]]; then
        echo "memlimit.sh: processes the command left behind are still in $group; not removing it" >&2
        return 0
    fi
    rmdir "$group" 2> /dev/null || echo "memlimit.sh: could not remove $group" >&2
}
trap cleanup EXIT

make_v1_group || make_v2_group || true
if [[ -z "$mechanism" ]] && [[ -d /run/systemd/system ]] && command -v systemd-run > /dev/null; then
    mechanism=systemd-run
fi
if [[ -z "$mechanism" ]]; then
    echo "memlimit.sh: no way to limit memory here (no writable cgroup v1/v2 memory controller, no systemd)" >&2
    exit 3
fi

start_ns="$(date +%s%N)"
status=0
case "$mechanism" in
    cgroup-v1 | cgroup-v2)
        # The child shell joins the group before exec, so the command and everything it starts are limited.
        bash -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' memlimit "$group" "$@" || status=$?
        ;;
    systemd-run)
        systemd-run --quiet --scope -p MemoryMax="$limit_bytes" -p MemorySwapMax=0 -- "$@" || status=$?
        ;;
esac
elapsed_s="$(awk -v ns="$(($(date +%s%N) - start_ns))" 'BEGIN { printf "%.3f", ns / 1e9 }')"

peak=null failcnt=null oom_kills=null major_faults=null
case "$mechanism" in
    cgroup-v1)
        peak="$(read_file "$group/memory.max_usage_in_bytes")"
        failcnt="$(read_file "$group/memory.failcnt")"
        # With swap present the memory+swap counter, set to the same limit, can be the one that refuses a charge.
        failcnt=$((failcnt + $(cat "$group/memory.memsw.failcnt" 2> /dev/null || echo 0)))
        oom_kills="$(stat_value "$group/memory.oom_control" oom_kill)"
        major_faults="$(stat_value "$group/memory.stat" total_pgmajfault)"
        ;;
    cgroup-v2)
        peak="$(read_file "$group/memory.peak")"
        failcnt="$(stat_value "$group/memory.events" max)"
        oom_kills="$(stat_value "$group/memory.events" oom_kill)"
        major_faults="$(stat_value "$group/memory.stat" pgmajfault)"
        ;;
esac
peak_mib=null
[[ "$peak" =~ ^[0-9]+$ ]] && peak_mib="$(awk -v b="$peak" 'BEGIN { printf "%.1f", b / 1048576 }')"

if command -v jq > /dev/null; then
    command_json="$(jq -cn --arg command "$*" '$command')"
else
    command_json="\"$(printf '%s' "$*" | tr '\n\t' '  ' | sed 's/\\/\\\\/g; s/"/\\"/g')\""
fi
printf '{"tool":"memlimit","mechanism":"%s","limit_bytes":%s,"peak_bytes":%s,"peak_mib":%s,"limit_hits":%s,' \
    "$mechanism" "$limit_bytes" "$peak" "$peak_mib" "$failcnt"
printf '"oom_kills":%s,"major_faults":%s,"cache_dropped":%s,"elapsed_s":%s,"exit_status":%s,"command":%s}\n' \
    "$oom_kills" "$major_faults" "$cache_dropped" "$elapsed_s" "$status" "$command_json"
exit "$status"
