#!/usr/bin/env python3
"""`diskformer serve` on a GPU: the same temperature-0 answers with one slot (each request alone) and with
-np 4 (requests decoded side by side in shared forwards), and how many sequences the shared forwards carried.
Standard library only (the lent GPU machine has no packages). Usage:
  serve_check.py DISKFORMER MODEL [extra serve flags...]     e.g. --device cuda
Prints one JSON line per server and a verdict; exits 1 when an answer differs or a request fails."""
import json
import re
import subprocess
import sys
import threading
import urllib.request

binary, model = sys.argv[1:3]
extra = sys.argv[3:]
PROMPTS = ["Tell me about disks", "Once upon a time", "The capital of France is", "List three colours",
           "Why is the sky blue?", "Write a haiku about memory", "2 + 2 =", "Hello there"]


def start(slots):
    server = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", "-c", "1024", "-np", str(slots),
                               "--temp", "0"] + extra, stderr=subprocess.PIPE, text=True)
    port, log = None, ""
    for line in server.stderr:
        log += line
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
        if line.startswith("ready:"):
            break
    if port is None:
        server.kill()
        sys.exit("serve did not start:\n" + log)
    threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
    return server, port


def ask(port, prompt):
    body = json.dumps({"messages": [{"role": "user", "content": prompt}], "max_tokens": 48,
                       "temperature": 0}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % port, body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())["choices"][0]["message"]["content"]


def metrics(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30) as r:
        text = r.read().decode()
    out = {}
    for name in ("decode_forwards_total", "decode_sequences_total", "mixed_forwards_total",
                 "decode_tokens_per_second", "requests_failed_total"):
        m = re.search(r"^diskformer_%s (\S+)$" % name, text, re.M)
        out[name] = float(m.group(1)) if m else None
    return out


answers = {}
ok = True
for slots in (1, 4):
    server, port = start(slots)
    got = [None] * len(PROMPTS)

    def run(i):
        try:
            got[i] = ask(port, PROMPTS[i])
        except Exception as e:  # noqa: BLE001 - reported below
            got[i] = "ERROR: %s" % e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"slots": slots, "metrics": metrics(port)}))
    server.terminate()
    server.wait(timeout=60)
    answers[slots] = got
    ok = ok and not any(a.startswith("ERROR") for a in got)
for i, p in enumerate(PROMPTS):
    same = answers[1][i] == answers[4][i]
    ok = ok and same
    print(json.dumps({"prompt": p, "same": same, "alone": answers[1][i][:60], "together": answers[4][i][:60]}))
print("serve_check: " + ("the same answers alone and side by side" if ok else "FAILED"))
sys.exit(0 if ok else 1)
