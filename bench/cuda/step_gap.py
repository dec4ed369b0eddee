#!/usr/bin/env python3
"""Per decode token from DF_CUDA_LINK_TIMELINE's marks: the device's busy time of a step (its graph reached to
its logits' download, or its token's read-back, reached) and the gap to the next step's graph (the host's
share of a token), medians over the last N steps.

    DF_CUDA_LINK_TIMELINE=/tmp/tl.csv diskformer bench -m MODEL --device cuda:0 --resident -p 8 -n 128 -r 2
    step_gap.py /tmp/tl.csv [N=100]"""
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r['kind'] in ('graph', 'download', 'downloaded', 'step')]
last = int(sys.argv[2]) if len(sys.argv) > 2 else 100
ev = [(r['kind'], float(r['host_us']), float(r['start_us']) if r['start_us'] else None) for r in rows]
busy, gap, host_after, walk = [], [], [], []
for i, (k, h, d) in enumerate(ev):
    if k != 'graph' or d is None: continue  # a step being captured has no device time
    # the next download after this graph, then the next graph
    j = next((j for j in range(i + 1, len(ev)) if ev[j][0] == 'download' and ev[j][2] is not None), None)
    n = next((n for n in range(i + 1, len(ev)) if ev[n][0] == 'graph' and ev[n][2] is not None), None)
    if j is None or n is None: continue
    busy.append(ev[j][2] - d)
    gap.append(ev[n][2] - ev[j][2])
    dl = next((m for m in range(j, n) if ev[m][0] == 'downloaded'), None)
    st = next((m for m in range(j, n) if ev[m][0] == 'step'), None)
    if dl is not None and st is not None:
        host_after.append(ev[st][1] - ev[dl][1])
        walk.append(ev[n][1] - ev[st][1])
busy, gap = busy[-last:], gap[-last:]
med = statistics.median
host = (f"; host: downloaded->next step {med(host_after[-last:]):.1f} us, step->graph (the walk) "
        f"{med(walk[-last:]):.1f} us" if host_after else
        "; host: each step queued before its predecessor's token was read back")
print(f"tokens {len(busy)}: device busy median {med(busy):.1f} us (min {min(busy):.1f}), gap to next graph median "
      f"{med(gap):.1f} us (min {min(gap):.1f}){host}")
