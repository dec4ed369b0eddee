#!/usr/bin/env python3
"""How busy the VRAM tier's host-to-device link was, and why it idled, from DF_CUDA_LINK_TIMELINE's CSV.

    link_timeline.py FILE [--tail-ms MS] [--record-bytes B] [--tokens N]

Looks at the copies of the last MS milliseconds of the file (default 400: the warm decode of a `bench -r 2
-n 64`, whose copies come last). A gap between two copies is *starved* when the next copy was queued by the
host after the link fell idle (the engine did not know, or had not yet said, what to copy), *held* when it
was queued before but the device started it later (it waited on an event: a staging record, a slot still
read by compute). Compute's waits: how long the compute stream, having reached a layer's experts, waited for
their copy. Host times are good to a few microseconds after
the downloads' marks have put them on the device's clock (see below); without marks they drift."""
import argparse, csv, sys

ap = argparse.ArgumentParser()
ap.add_argument('file')
ap.add_argument('--tail-ms', type=float, default=400.0)
ap.add_argument('--record-bytes', type=float, default=5308416)
ap.add_argument('--tokens', type=float, default=0, help='decode tokens in the window, for per-token figures')
a = ap.parse_args()

copies, waits, marks = [], [], []
for r in csv.DictReader(open(a.file)):
    if r['kind'] not in ('copy', 'wait'):
        marks.append(dict(what=r['kind'], host=float(r['host_us']),
                          reached=float(r['start_us']) if r['start_us'] else None))
    elif r['kind'] == 'copy':
        copies.append(dict(seq=int(r['seq']), host=float(r['host_us']), start=float(r['start_us']),
                           end=float(r['end_us']), written=float(r['written_us'])))
    else:
        waits.append(dict(host=float(r['host_us']), reached=float(r['start_us']), copy=int(r['copy_seq'])))


def steps_summary(marks, t_from):
    """Per step (medians): the host's walk from the step's begin to its end (with a step graph the graph is
    launched at the end), the GPU's remaining work after it (to the logits download), and the host's time
    from having the logits to the next step's begin (sampling, the engine's bookkeeping)."""
    ms = sorted((m for m in marks if m['host'] >= t_from), key=lambda m: m['host'])
    walk, gpu_after, between = [], [], []
    for i, m in enumerate(ms):
        if m['what'] != 'step':
            continue
        end = next((x for x in ms[i:] if x['what'] == 'step_end'), None)
        if end is None:
            break
        walk.append(end['host'] - m['host'])
        after = [x for x in ms[i:] if x['host'] >= end['host']]
        dl = next((x for x in after if x['what'] == 'download'), None)
        dd = next((x for x in after if x['what'] == 'downloaded'), None)
        nxt = next((x for x in after if x['what'] == 'step'), None)
        if dl is not None and dl['reached'] is not None:
            gpu_after.append(dl['reached'] - end['host'])
        if dd is not None and nxt is not None:
            between.append(nxt['host'] - dd['host'])
    med = lambda v: sorted(v)[len(v) // 2] if v else float('nan')
    print(f"steps: {len(walk)}; median us: host walk begin->end {med(walk):.1f}, GPU after the end to the logits "
          f"{med(gpu_after):.1f}, host from the logits to the next step {med(between):.1f}")


# The host's and the device's clocks drift apart over a run (tens of microseconds a second), so each host time
# is moved onto the device's clock by the downloads near it: a download's return (host) comes a few
# microseconds after the device reached it, and the least such difference within 20 ms is taken as the offset.
pairs = []
ms_sorted = sorted(marks, key=lambda m: m['host'])
for i, m in enumerate(ms_sorted):
    if m['what'] == 'download' and m['reached'] is not None:
        nxt = next((x for x in ms_sorted[i + 1:i + 4] if x['what'] == 'downloaded'), None)
        if nxt is not None:
            pairs.append((nxt['host'], nxt['host'] - m['reached']))
if pairs:
    import bisect
    pair_t = [p[0] for p in pairs]

    def to_device(h):
        lo, hi = bisect.bisect_left(pair_t, h - 20000), bisect.bisect_right(pair_t, h + 20000)
        near = pairs[lo:hi] or [min(pairs, key=lambda p: abs(p[0] - h))]
        return h - min(p[1] for p in near)

    for c in copies:
        c['host'] = to_device(c['host'])
    for w in waits:
        w['host'] = to_device(w['host'])
    for m in marks:
        m['host'] = to_device(m['host'])

if not copies:
    t_last = max(m['host'] for m in marks) if marks else 0
    steps_summary(marks, t_last - a.tail_ms * 1000.0)
    sys.exit(0)
copies.sort(key=lambda c: c['start'])
t_end = max(c['end'] for c in copies)
t0 = t_end - a.tail_ms * 1000.0
win = [c for c in copies if c['start'] >= t0]
span = win[-1]['end'] - win[0]['start']
busy, starved, held, boundaries = 0.0, [], [], []
cur_s, cur_e = win[0]['start'], win[0]['end']
for prev, c in zip(win, win[1:]):
    idle_from = max(prev['end'], cur_e)
    gap = c['start'] - idle_from
    if c['start'] > cur_e:
        busy += cur_e - cur_s
        cur_s = c['start']
    cur_e = max(cur_e, c['end'])
    if gap <= 1.0:
        continue
    (starved if c['host'] > idle_from else held).append(gap)
    if gap > 300:
        boundaries.append((idle_from, c))
busy += cur_e - cur_s
dur = sorted(c['end'] - c['start'] for c in win)
print(f"window {span / 1e3:.1f} ms, {len(win)} copies, link busy {100 * busy / span:.1f} %, "
      f"median copy {dur[len(dur) // 2]:.1f} us ({a.record_bytes / dur[len(dur) // 2] / 1e3:.1f} GB/s), "
      f"{a.record_bytes * len(win) / span / 1e3:.1f} GB/s over the window")
unpack = sorted(c['written'] - c['end'] for c in win)
print(f"slot written after its copy: median {unpack[len(unpack) // 2]:.1f} us, max {unpack[-1]:.1f} us")
per = f" ({{:.0f}} us a token)" if a.tokens else ""
for name, gaps in (('starved', starved), ('held', held)):
    tot = sum(gaps)
    line = f"{name}: {len(gaps)} gaps, {tot / 1e3:.2f} ms = {100 * tot / span:.1f} % of the window"
    if a.tokens:
        line += f", {tot / a.tokens:.0f} us a token"
    bins = [(0, 20), (20, 100), (100, 300), (300, 1e12)]
    line += "; by size (us) " + ", ".join(
        f"{lo:.0f}-{hi:.0f}: {sum(1 for g in gaps if lo <= g < hi)} / {sum(g for g in gaps if lo <= g < hi) / 1e3:.2f} ms"
        .replace('-1000000000000', '+') for lo, hi in bins)
    print(line)
by_seq = {c['seq']: c for c in copies}
stalls = [max(0.0, by_seq[w['copy']]['written'] - w['reached']) for w in waits
          if w['reached'] >= t0 and w['copy'] in by_seq]
tot = sum(stalls)
line = f"compute waited on copies: {sum(1 for s in stalls if s > 0)} of {len(stalls)} waits, {tot / 1e3:.2f} ms = " \
       f"{100 * tot / span:.1f} % of the window"
if a.tokens:
    line += f", {tot / a.tokens:.0f} us a token"
print(line)
# Host lead: how long before the link's previous copy ended was each copy queued (negative: starved).
lead = sorted(prev['end'] - c['host'] for prev, c in zip(win, win[1:]))
q = lambda p: lead[min(len(lead) - 1, int(p * len(lead)))]
print(f"queued ahead of the link (us): p10 {q(0.1):.0f}, p50 {q(0.5):.0f}, p90 {q(0.9):.0f}")

# The long gaps (a token's end to the next one's first copy): when, after the link fell idle, the host ended
# the step, began the next, compute reached its first download (the first MoE layer's routing), the host had
# it, and queued the first copy. Medians over the gaps; host times carry the clocks' offset.
if boundaries and marks:
    marks.sort(key=lambda m: m['host'])
    pts = {k: [] for k in ('step_end (host)', 'step (host)', 'first download reached (device)',
                           'first download returned (host)', 'first copy queued (host)', 'first copy started (device)')}
    for idle_from, c in boundaries:
        ms = [m for m in marks if idle_from - 200 <= m['host'] <= c['host'] + 5]
        ends = [m for m in ms if m['what'] == 'step_end']
        begins = [m for m in ms if m['what'] == 'step']
        if not ends or not begins:
            continue
        b = begins[-1]
        dl = [m for m in ms if m['what'] == 'download' and m['host'] >= b['host']]
        dd = [m for m in ms if m['what'] == 'downloaded' and m['host'] >= b['host']]
        pts['step_end (host)'].append(ends[-1]['host'] - idle_from)
        pts['step (host)'].append(b['host'] - idle_from)
        if dl: pts['first download reached (device)'].append(dl[0]['reached'] - idle_from)
        if dd: pts['first download returned (host)'].append(dd[0]['host'] - idle_from)
        pts['first copy queued (host)'].append(c['host'] - idle_from)
        pts['first copy started (device)'].append(c['start'] - idle_from)
    print(f"token boundaries ({len(boundaries)} gaps over 300 us), median us after the link fell idle:")
    for k, v in pts.items():
        if v:
            v.sort()
            print(f"  {k:34s} {v[len(v) // 2]:8.1f}")
    steps_summary(marks, t0)
    # Downloads per step and the host's time from a download's return to the next copy it queued.
    dd = [m for m in marks if m['what'] == 'downloaded' and m['host'] >= t0]
    hq = sorted(c['host'] for c in win)
    import bisect
    lat = sorted(hq[i] - m['host'] for m in dd for i in [bisect.bisect_left(hq, m['host'])] if i < len(hq))
    if lat:
        print(f"host from a download's return to the next copy queued (us): p10 {lat[len(lat) // 10]:.0f}, "
              f"p50 {lat[len(lat) // 2]:.0f}, p90 {lat[9 * len(lat) // 10]:.0f}")
