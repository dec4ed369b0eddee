#!/usr/bin/env python3
"""Per-kernel GPU time of one forward step from an ncu CSV (--metrics gpu__time_duration.sum,launch__grid_size).

    ncu_step.py NCU.csv [STEP]   STEP: which forward (0 = first), counted by the embedding kernel (get_rows)

Prints the step's kernel count and GPU time, then each kernel name's calls, total and mean time and grid."""
import collections, csv, sys

rows = list(csv.reader(open(sys.argv[1])))
step = int(sys.argv[2]) if len(sys.argv) > 2 else -2
hdr, kernels = None, collections.OrderedDict()
for r in rows:
    if 'Kernel Name' in r:
        hdr = r
        continue
    if not hdr or len(r) != len(hdr):
        continue
    d = dict(zip(hdr, r))
    key = (d['ID'], d['Kernel Name'])
    k = kernels.setdefault(key, {})
    v = float(d['Metric Value'].replace(',', ''))
    if d['Metric Name'] == 'gpu__time_duration.sum':
        v *= {'usecond': 1000, 'msecond': 1e6}.get(d['Metric Unit'], 1)
        k['ns'] = v
    else:
        k[d['Metric Name']] = v
seq = [(name, m) for (_, name), m in kernels.items()]
starts = [i for i, (name, _) in enumerate(seq) if 'get_rows' in name] + [len(seq)]
if step < 0:
    step += len(starts) - 1
lo, hi = starts[step], starts[step + 1]
tot = collections.defaultdict(lambda: [0, 0.0, 0])
for name, m in seq[lo:hi]:
    short = name.split('(')[0][:70]
    t = tot[short]
    t[0] += 1
    t[1] += m.get('ns', 0)
    t[2] = int(m.get('launch__grid_size', 0))
s = sum(v[1] for v in tot.values())
print(f'step {step} of {len(starts) - 1}: {hi - lo} kernels, {s / 1e3:.1f} us GPU')
for k, v in sorted(tot.items(), key=lambda x: -x[1][1]):
    print(f'{v[1] / 1000:9.1f} us {v[0]:5d} calls {v[1] / v[0] / 1000:7.2f} us/call grid {v[2]:6d}  {k}')
