#!/usr/bin/env python3
"""The chat page of `diskformer serve` in a real headless browser (Debian's chromium): it loads, a message
sent through it (/?q=...) gets a streamed answer, the stats panel fills from /props, and a screenshot of it
is not blank. Usage: test_chat_page_browser.py DISKFORMER MODEL.gguf SCRATCH. Exits 77 (ctest's skip)
without chromium (scripts/install-deps.sh installs it)."""
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

browser = shutil.which("chromium") or shutil.which("chromium-browser")
if not browser:
    print("SKIP: chromium is not installed (scripts/install-deps.sh installs it)")
    sys.exit(77)
binary, model, scratch = sys.argv[1:4]
os.makedirs(scratch, exist_ok=True)
env = dict(os.environ, XDG_CACHE_HOME=os.path.join(scratch, "xdg-cache"))
server = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", "-c", "512", "-t", "1", "--temp", "0"],
                          stderr=subprocess.PIPE, text=True, env=env)
port = None
log = ""
for line in server.stderr:
    log += line
    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
    if m:
        port = int(m.group(1))
    if line.startswith("ready:"):
        break
if port is None:
    print("serve did not start:\n" + log)
    sys.exit(1)

# The page polls /props every (virtual) second, so virtual time runs on while the answer streams in: the
# budget must outlast the slowest generation (20 s of it was too short for an ASan build on a loaded machine).
flags = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--user-data-dir=" + os.path.join(scratch, "profile"), "--window-size=1000,700",
         "--virtual-time-budget=120000"]
url = "http://127.0.0.1:%d/?q=Hello%%20there" % port
failed = False
try:
    dom = subprocess.run(flags + ["--dump-dom", url], capture_output=True, text=True, timeout=240).stdout
    answer = re.search(r'<div class="msg assistant">.*?<div[^>]*>(.*?)</div><div data-done="1">(.*?)</div>', dom, re.S)
    if not answer:
        failed = True
        print("not ok - the message got no finished answer; DOM:\n" + dom[:4000])
    elif not answer.group(2).strip():
        failed = True
        print("not ok - the answer is empty")
    else:
        print("ok - streamed answer: %r" % answer.group(2)[:80])
    ntok = re.search(r'<dd id="ntok">(\d+)</dd>', dom)
    if 'data-filled="1"' not in dom or ntok is None or int(ntok.group(1)) == 0:
        failed = True
        print("not ok - the stats panel did not fill")
    else:
        print("ok - stats panel: %s tokens generated" % re.search(r'<dd id="ntok">(\d+)</dd>', dom).group(1))

    shot = os.path.join(scratch, "page.png")
    if os.path.exists(shot):
        os.remove(shot)
    subprocess.run(flags + ["--screenshot=" + shot, url], capture_output=True, timeout=240)
    with open(shot, "rb") as f:
        png = f.read()
    # Decode the PNG (8-bit RGB/RGBA, non-interlaced, as chromium writes it) and count distinct colours.
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        data = png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", data[:10])
            channels = {2: 3, 6: 4}[colour]
        elif kind == b"IDAT":
            idat += data
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    prev = bytearray(stride)
    colours = set()
    for y in range(height):
        f = raw[y * (stride + 1)]
        row = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = row[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 1:
                row[i] = (row[i] + a) & 255
            elif f == 2:
                row[i] = (row[i] + b) & 255
            elif f == 3:
                row[i] = (row[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        prev = row
        if y % 4 == 0:
            for x in range(0, width, 4):
                colours.add(bytes(row[x * channels:x * channels + 3]))
    if len(colours) < 8:
        failed = True
        print("not ok - the screenshot is blank (%d colours)" % len(colours))
    else:
        print("ok - screenshot %dx%d with %d colours" % (width, height, len(colours)))
finally:
    server.terminate()
    server.wait(timeout=60)
sys.exit(1 if failed else 0)
