#!/usr/bin/env bash
# Issue 11's disk-bound run on a GPU machine: the expert store's pages evicted from the page cache, the disk's
# random-read ceiling at the store's record size measured on the store itself (O_DIRECT, one reader and
# several in flight), then diskformer bench in a cgroup v2 memory limit with a small VRAM tier and a small RAM
# tier, so that most misses are read from disk during decode. Needs a writable /sys/fs/cgroup (root in the
# machine's cgroup namespace); the lent machine has no fio and denies drop_caches, so the ceiling is read
# with Python and the store's files are evicted with posix_fadvise(DONTNEED) (clean pages go at once).
#   bench/cuda/run_gpu_cgroup.sh BIN_DIR STORE [LIMIT=8G] [GPU=2G] [RAM=4G] [P=128] [N=64]
# One JSON line per bench run on stdout (with "cgroup_peak_bytes" added), the ceilings as JSON lines before.
set -euo pipefail
BIN=$1
STORE=$2
LIMIT=${3:-8G}
GPU=${4:-2G}
RAM=${5:-4G}
P=${6:-128}
N=${7:-64}
record_bytes=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]+"/manifest.json"))["layout"]["record_bytes"])' "$STORE")

evict() {
  python3 - "$STORE" <<'PY'
import os, sys
for name in os.listdir(sys.argv[1]):
    path = os.path.join(sys.argv[1], name)
    if os.path.isfile(path):
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
PY
}

# Random whole-record reads of experts.bin with O_DIRECT: `depth` threads, each one read in flight.
ceiling() {
  python3 - "$STORE/experts.bin" "$record_bytes" "$1" <<'PY'
import json, mmap, os, random, sys, threading, time
path, rec, depth = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
n = os.path.getsize(path) // rec
stop = time.monotonic() + 8.0
done = [0] * depth
def reader(i):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, rec)
    rng = random.Random(i)
    while time.monotonic() < stop:
        off = rng.randrange(n) * rec
        os.preadv(fd, [buf], off)
        done[i] += 1
    os.close(fd)
t0 = time.monotonic()
ts = [threading.Thread(target=reader, args=(i,)) for i in range(depth)]
for t in ts: t.start()
for t in ts: t.join()
dt = time.monotonic() - t0
print(json.dumps({"ceiling": "direct random records", "depth": depth, "record_bytes": rec,
                  "MBps": sum(done) * rec / dt / 1e6, "records": sum(done)}))
PY
}

for d in 1 4 8; do evict; ceiling "$d"; done

cg=/sys/fs/cgroup/diskformer-bench-$$
mkdir "$cg"
trap 'rmdir "$cg" 2>/dev/null || true' EXIT
echo "$LIMIT" > "$cg/memory.max"
echo 0 > "$cg/memory.swap.max" 2>/dev/null || true
for la in 1 2; do
  evict
  out=$(bash -c "echo \$\$ > $cg/cgroup.procs; exec \"$BIN/diskformer\" bench -m \"$STORE\" --device cuda -p $P -n $N \
        -r 1 --gpu-cache $GPU --ram-cache $RAM --lookahead $la --json" 2>"${TMPDIR:-/tmp}/cgroup-bench.err" | tail -1) ||
    { cat "${TMPDIR:-/tmp}/cgroup-bench.err" >&2; exit 1; }
  peak=$(cat "$cg/memory.peak" 2>/dev/null || echo 0)
  echo "$out" | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); d["cgroup_limit"]=sys.argv[1]; d["cgroup_peak_bytes"]=int(sys.argv[2]); print(json.dumps(d))' "$LIMIT" "$peak"
done
