#!/usr/bin/env python3
"""A loopback stand-in for the Hugging Face hub, for diskformer's pull tests.

Serves, from a JSON config that is re-read on every request (a test rewrites it to change the behaviour):
  GET /api/models/ORG/NAME/revision/REV[?blobs=true]   the listing: {"sha", "siblings": [{"rfilename", "size",
                                                        "lfs": {"sha256", "size", "pointerSize"}}]}
  GET /ORG/NAME/resolve/REV/FILE                       the file, with Range (206) support; optionally by a
                                                        redirect to /_blob/..., as the hub's CDN does
Config:
  {"repos": {"ORG/NAME": {"commit": "<40 hex>", "branches": ["main"],
                          "files": {"PATH": {"source": "/abs/file", "sha256": "override", "size": override}}}},
   "faults": {"require_token": "T",      401 without "Authorization: Bearer T" (403 for forbidden_token)
              "forbidden_token": "U",
              "fail_5xx": N,              the first N requests answer 503
              "drop_at": [OFFSET, ...],   a download is cut once at each file offset (connection closed)
              "ignore_range": true,       Range is ignored: always 200 with the whole file
              "slow_bps": B,              downloads are sent at about B bytes per second
              "redirect": true,           resolve/ answers 302 to /_blob/
              "listing_body": "...",      the listing's raw body instead of the real one (hostile JSON)
              "error_padding": N}}        N spaces after every error body (a refusal that never ends)
A change of the config's content resets the fault counters. Every request is appended to --log as a JSON line
{"method", "path", "range", "auth", "status"}. The chosen port is printed on stdout as "PORT N".
"""
import argparse
import hashlib
import http.server
import json
import os
import socket
import sys
import threading
import time
import urllib.parse

lock = threading.Lock()
state = {"config_text": None, "config": {}, "fail_5xx_done": 0, "drops_done": set()}
sha_cache = {}


def load_config(path):
    with open(path, "rb") as f:
        text = f.read()
    with lock:
        if text != state["config_text"]:
            state["config_text"] = text
            state["config"] = json.loads(text)
            state["fail_5xx_done"] = 0
            state["drops_done"] = set()
        return state["config"]


def file_sha256(path):
    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in sha_cache:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        sha_cache[key] = h.hexdigest()
    return sha_cache[key]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    config_path = None
    log_path = None

    def log_message(self, fmt, *args):
        pass

    def record(self, status):
        if not self.log_path:
            return
        line = json.dumps({"method": self.command, "path": self.path, "range": self.headers.get("Range"),
                           "auth": self.headers.get("Authorization"), "status": status})
        with lock, open(self.log_path, "a") as f:
            f.write(line + "\n")

    def answer(self, status, body=b"", content_type="application/json", headers=()):
        self.record(status)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client stopped reading, as it may
            self.close_connection = True

    def error(self, status, message):
        padding = b" " * getattr(self, "faults", {}).get("error_padding", 0)
        self.answer(status, json.dumps({"error": message}).encode() + padding)

    def do_GET(self):
        cfg = load_config(self.config_path)
        faults = cfg.get("faults") or {}
        self.faults = faults
        with lock:
            fail_now = state["fail_5xx_done"] < faults.get("fail_5xx", 0)
            if fail_now:
                state["fail_5xx_done"] += 1
        if fail_now:
            return self.error(503, "Service Unavailable (test)")
        token = faults.get("require_token")
        if token:
            auth = self.headers.get("Authorization")
            if auth == "Bearer " + faults.get("forbidden_token", "\0"):
                return self.error(403, "Access to this model is restricted (test)")
            if auth != "Bearer " + token:
                return self.error(401, "Invalid credentials in Authorization header (test)")
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
        if len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4] == "revision":
            return self.listing(cfg, parts[2] + "/" + parts[3], "/".join(parts[5:]), faults)
        if len(parts) >= 5 and parts[2] == "resolve":
            if faults.get("redirect"):
                return self.answer(302, b"", "text/plain", [("Location", "/_blob" + url.path)])
            return self.download(cfg, parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]), faults)
        if len(parts) >= 6 and parts[0] == "_blob" and parts[3] == "resolve":
            return self.download(cfg, parts[1] + "/" + parts[2], parts[4], "/".join(parts[5:]), faults)
        return self.error(404, "Not Found (test)")

    def find_repo(self, cfg, repo, rev):
        r = cfg.get("repos", {}).get(repo)
        if r is None:
            return None, "Repository not found (test)"
        if rev != r["commit"] and rev not in r.get("branches", ["main"]):
            return None, "Invalid rev id: " + rev
        return r, None

    def listing(self, cfg, repo, rev, faults):
        r, why = self.find_repo(cfg, repo, rev)
        if r is None:
            return self.error(404, why)
        if "listing_body" in faults:
            return self.answer(200, faults["listing_body"].encode())
        siblings = [{"rfilename": ".gitattributes", "size": 1519, "blobId": "0" * 40}]
        for name, f in r["files"].items():
            size = f.get("size", os.path.getsize(f["source"]))
            sha = f.get("sha256") or file_sha256(f["source"])
            siblings.append({"rfilename": name, "size": size, "blobId": "1" * 40,
                             "lfs": {"sha256": sha, "size": size, "pointerSize": 134}})
        body = {"id": repo, "sha": r["commit"], "private": False, "gated": False, "siblings": siblings}
        return self.answer(200, json.dumps(body).encode())

    def download(self, cfg, repo, rev, path, faults):
        r, why = self.find_repo(cfg, repo, rev)
        if r is None:
            return self.error(404, why)
        f = r["files"].get(path)
        if f is None:
            return self.error(404, "Entry not found (test)")
        with open(f["source"], "rb") as src:
            data = src.read()
        size = len(data)
        start, status, headers = 0, 200, []
        rng = self.headers.get("Range")
        if rng and not faults.get("ignore_range"):
            spec = rng.strip()
            if not spec.startswith("bytes=") or "," in spec:
                return self.error(400, "bad Range (test)")
            first, _, last = spec[6:].partition("-")
            start = int(first)
            end = int(last) if last else size - 1
            if start >= size:
                self.record(416)
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = data[start:end + 1]
            status = 206
            headers.append(("Content-Range", "bytes %d-%d/%d" % (start, start + len(data) - 1, size)))
        cut = None
        with lock:
            for offset in sorted(faults.get("drop_at", [])):
                if offset > start and offset < start + len(data) and offset not in state["drops_done"]:
                    state["drops_done"].add(offset)
                    cut = offset - start
                    break
        self.record(status)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Accept-Ranges", "bytes")
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        body = data if cut is None else data[:cut]
        bps = faults.get("slow_bps", 0)
        step = 64 << 10 if not bps else max(1024, bps // 20)
        try:
            for at in range(0, len(body), step):
                self.wfile.write(body[at:at + step])
                if bps:
                    self.wfile.flush()
                    time.sleep(step / bps)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        if cut is not None:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--log")
    a = p.parse_args()
    Handler.config_path = a.config
    Handler.log_path = a.log
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print("PORT %d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
