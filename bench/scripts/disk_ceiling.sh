#!/usr/bin/env bash
# Random-read ceiling of the disk for records of one size (an expert record), measured with fio:
#   direct:   O_DIRECT (no page cache), queue depth 1 and 4, io_uring; what a streaming engine that bypasses the page
#             cache can get at best
#   buffered: through the page cache after dropping it (cold), queue depth 1; what mmap/pread of a cold file gets
# Prints one JSON line per run: MB/s (1e6 bytes/s), records/s, mean and p99 latency of one record.
#
# usage: disk_ceiling.sh [--file PATH] [--file-gib 8] [--record-bytes N] [--depths "1 4"] [--runtime-s 10]
#                        [--engine io_uring] [--no-buffered] [--keep-cache]
#   --file          test file (created once, filled with fio's random data; reused when its size matches); put it on
#                   the disk the models live on. Default: /var/tmp/diskformer-disk-ceiling-<GiB>g.bin. The script
#                   marks the files it creates (a sidecar PATH.disk-ceiling naming the file's inode) and refuses
#                   to write over any other existing file: an expert store or a model is never overwritten.
#   --record-bytes  default 5308416 = 3 x 2048 x 1536 x 18/32 bytes (LFM2.5-24B Q4_0 expert: gate, up, down;
#                   already a multiple of 4096)
#   --keep-cache    do not drop the page cache before the buffered run (it is then not a cold measurement)
set -euo pipefail

file=""
file_gib=8
record_bytes=$((3 * 2048 * 1536 * 18 / 32))
depths="1 4"
runtime_s=10
engine=io_uring
buffered=1
drop_cache=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        --file) file="$2"; shift 2 ;;
        --file-gib) file_gib="$2"; shift 2 ;;
        --record-bytes) record_bytes="$2"; shift 2 ;;
        --depths) depths="$2"; shift 2 ;;
        --runtime-s) runtime_s="$2"; shift 2 ;;
        --engine) engine="$2"; shift 2 ;;
        --no-buffered) buffered=0; shift ;;
        --keep-cache) drop_cache=0; shift ;;
        -h | --help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "disk_ceiling.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
for number in "$file_gib" "$record_bytes" "$runtime_s"; do
    if ! [[ "$number" =~ ^[1-9][0-9]*$ ]]; then
        echo "disk_ceiling.sh: '$number' is not a positive integer" >&2
        exit 2
    fi
done
# O_DIRECT needs offsets and sizes aligned to the logical block size; 4096 covers every common disk.
record_bytes=$(((record_bytes + 4095) / 4096 * 4096))
file="${file:-/var/tmp/diskformer-disk-ceiling-${file_gib}g.bin}"
file_bytes=$((file_gib << 30))

# Files this script made carry a marker beside them naming their inode; anything else at the path (a model, an
# expert store, a link to one) is never written, whatever its size. Checked before fio is even installed.
marker="$file.disk-ceiling"
marker_prefix="created by diskformer bench/scripts/disk_ceiling.sh"
marker_text() { printf '%s: inode %s\n' "$marker_prefix" "$(stat -c %i "$file")"; }
refuse() {
    echo "disk_ceiling.sh: $1: refusing to write over it (this script only rewrites the test files it created)." \
        "Pass --file with a path that does not exist yet." >&2
    exit 2
}
if [[ -e "$marker" || -L "$marker" ]] && ! { [[ -f "$marker" && ! -L "$marker" ]] &&
    head -n 1 "$marker" | grep -qF "$marker_prefix"; }; then
    refuse "$marker exists and is not a marker of this script"
fi
if [[ -L "$file" ]]; then
    refuse "$file is a symbolic link"
elif [[ -e "$file" ]]; then
    [[ -f "$file" ]] || refuse "$file is not a regular file"
    [[ -f "$marker" && "$(cat "$marker")" == "$(marker_text)" ]] ||
        refuse "$file exists and was not created by this script (no marker $marker naming its inode)"
fi

if ! command -v fio > /dev/null || ! command -v jq > /dev/null; then
    echo "disk_ceiling.sh: installing fio and jq" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio jq) > /dev/null
fi

if [[ ! -f "$file" || "$(stat -c %s "$file")" -ne "$file_bytes" ]]; then
    echo "disk_ceiling.sh: writing ${file_gib} GiB test file $file" >&2
    mkdir -p "$(dirname "$file")"
    rm -f "$file" "$marker"  # ours (checked above), of another size
    # Claimed with noclobber, so a file that appeared since the check is not truncated; marked before fio writes.
    (set -o noclobber && : > "$file") || refuse "$file appeared while this script was starting"
    marker_text > "$marker"
    # Real data, written through to the disk: a sparse or fallocated file would read back zeros without any I/O.
    fio --name=layout --filename="$file" --size="$file_bytes" --rw=write --bs=4M --direct=1 --ioengine=psync \
        --end_fsync=1 --output=/dev/null
fi

# One fio run; prints its JSON summary line.
# Args: mode (direct|buffered), iodepth, fio engine, whether the cache was dropped (true|false|null).
run_fio() {
    local mode="$1" depth="$2" run_engine="$3" cache_dropped="$4"
    local direct=1 extra=()
    if [[ "$mode" == buffered ]]; then
        direct=0
        # Cold reads only: the random map makes fio read every record at most once, so none comes from the cache
        # that this run itself filled; the run ends after runtime_s or when all records were read once.
        extra=(--blockalign="$record_bytes")
    else
        # Any 4 KiB-aligned offset, as records packed in a file are; repeats are harmless without a page cache.
        extra=(--blockalign=4096 --norandommap --time_based)
    fi
    fio --name="randread-$mode-qd$depth" --filename="$file" --size="$file_bytes" --rw=randread --bs="$record_bytes" \
        --direct="$direct" --ioengine="$run_engine" --iodepth="$depth" --runtime="$runtime_s" --randrepeat=0 \
        "${extra[@]}" --output-format=json |
        jq -c --arg mode "$mode" --arg engine "$run_engine" --arg fbytes "$file_bytes" --arg file "$file" \
            --argjson record "$record_bytes" --argjson dropped "$cache_dropped" '
            .jobs[0].read as $r | {
                tool: "disk_ceiling", mode: $mode, iodepth: (.jobs[0]["job options"].iodepth | tonumber),
                engine: $engine, record_bytes: $record, mb_s: (($r.bw_bytes / 1e6) * 100 | round / 100),
                records_s: (($r.iops * 100) | round / 100), records_read: $r.total_ios,
                lat_ms_mean: (($r.clat_ns.mean / 1e4) | round / 100),
                lat_ms_p99: ((($r.clat_ns.percentile["99.000000"] // 0) / 1e4) | round / 100),
                runtime_s: ($r.runtime / 1000), file: $file, file_bytes: ($fbytes | tonumber),
                cache_dropped: $dropped}'
}

for depth in $depths; do
    run_fio direct "$depth" "$engine" null
done

if [[ "$buffered" -eq 1 ]]; then
    dropped=false
    if [[ "$drop_cache" -eq 1 ]]; then
        sync
        if { echo 3 > /proc/sys/vm/drop_caches; } 2> /dev/null; then
            dropped=true
        else
            echo "disk_ceiling.sh: cannot write /proc/sys/vm/drop_caches; the buffered run may read cached pages" >&2
        fi
    fi
    # Synchronous pread: what one thread reading a cold mmapped or buffered file waits for per record.
    run_fio buffered 1 psync "$dropped"
fi
