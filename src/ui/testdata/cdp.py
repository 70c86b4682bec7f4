#!/usr/bin/env python3
"""A small Chrome DevTools Protocol shell for the dashboard's browser test (src/ui/browser_test.cc).

Starts Debian's chromium headless with --remote-debugging-pipe (CDP over fds 3 and 4, messages
separated by NUL: no WebSocket client and no npm package needed), attaches to its page, then reads
one JSON command per line on stdin and answers one JSON line on stdout:
  {"op": "navigate", "url": U}                      -> {"ok": true}
  {"op": "eval", "expr": JS}                        -> {"ok": true, "value": V}   (promises awaited)
  {"op": "wait", "expr": JS, "timeout": S}          -> {"ok": true, "value": V} once JS is truthy
  {"op": "screenshot", "path": P}                   -> {"ok": true}
  {"op": "serve", "html": H}                        -> {"ok": true, "port": N} (a page on 127.0.0.1)
  {"op": "quit"}
Errors: {"ok": false, "error": "..."}. Only loopback URLs are used by the test.
"""
import base64
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time


class Cdp:
    def __init__(self, chromium):
        self.profile = tempfile.mkdtemp(prefix="cloister-ui-chromium.")
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()

        def fds():  # in the child: the read end on fd 3, the write end on fd 4, both inherited
            a, b = os.dup(to_child_r), os.dup(from_child_w)  # (either may already be 3 or 4)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
             "--disable-sync", "--disable-component-update", "--hide-scrollbars",
             "--window-size=1280,860", "--user-data-dir=" + self.profile,
             "--remote-debugging-pipe", "about:blank"],
            preexec_fn=fds, close_fds=False,
            stdout=subprocess.DEVNULL, stderr=None if os.environ.get("CDP_DEBUG") else subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self.buf = b""
        self.next_id = 0
        self.session = None
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": page["targetId"], "flatten": True})["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")

    def call(self, method, params=None, timeout=60):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self.to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            while b"\0" not in self.buf:
                chunk = os.read(self.from_child, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the pipe")
                self.buf += chunk
            raw, self.buf = self.buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(method + ": " + json.dumps(reply["error"]))
                return reply.get("result", {})
        raise RuntimeError(method + ": no answer")

    def eval(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                           "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError("eval: " + json.dumps(r["exceptionDetails"])[:2000])
        return r["result"].get("value")

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


def serve(html):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv.server_address[1]


def main():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print(json.dumps({"ok": False, "error": "no chromium"}), flush=True)
        return 1
    cdp = Cdp(chromium)
    print(json.dumps({"ok": True, "ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op == "quit":
                break
            if op == "navigate":
                cdp.call("Page.navigate", {"url": cmd["url"]})
                out = {"ok": True}
            elif op == "eval":
                out = {"ok": True, "value": cdp.eval(cmd["expr"])}
            elif op == "wait":
                deadline = time.time() + cmd.get("timeout", 30)
                value, last_error = None, ""
                while time.time() < deadline:
                    try:
                        value = cdp.eval(cmd["expr"])
                    except RuntimeError as e:  # the page is navigating
                        value, last_error = None, str(e)
                    if value:
                        break
                    time.sleep(0.1)
                out = {"ok": bool(value), "value": value}
                if not value:
                    out["error"] = "timed out waiting for " + cmd["expr"][:200] + " " + last_error[:300]
            elif op == "screenshot":
                png = cdp.call("Page.captureScreenshot", {"format": "png"})["data"]
                with open(cmd["path"], "wb") as f:
                    f.write(base64.b64decode(png))
                out = {"ok": True}
            elif op == "serve":
                out = {"ok": True, "port": serve(cmd["html"])}
            else:
                out = {"ok": False, "error": "unknown op " + op}
        except Exception as e:  # answer, never hang the test
            out = {"ok": False, "error": str(e)[:2000]}
        print(json.dumps(out), flush=True)
    cdp.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
