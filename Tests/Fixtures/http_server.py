#!/usr/bin/env python3
"""A test web server on 127.0.0.1 for the install tests: serves a folder with ETag and
Last-Modified (answering 304 to conditional requests), counts requests per path, and has routes
that misbehave: /hang (never answers), /trickle/<file> (one byte a second), /truncated/<file>
(promises more than it sends), /redirect-file (to file:///etc/passwd), /redirect-to/<url>,
/not-modified/<anything> (304 whatever was asked, a condition or none), /slow/<file> (in 20
pieces over two seconds).
Prints its port on the first line of stdout; GET /_count/<path> returns the count of requests for
<path> as text, GET /_count/<path>?status=304 how many of them were answered, in full, with that
status (so a test can wait until a conditional request has been answered, not merely received;
the trickle and truncated routes are not counted by status)."""
import ctypes, hashlib, http.server, os, signal, sys, threading, time, email.utils

# Whatever mask the test runner's thread had, this server must die on SIGTERM; it also dies with
# the test process (PR_SET_PDEATHSIG) and after ten minutes in any case, so none is left behind.
signal.pthread_sigmask(signal.SIG_SETMASK, [])
signal.signal(signal.SIGTERM, signal.SIG_DFL)
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
except OSError:
    pass
_lifetime = threading.Timer(600, lambda: os._exit(0))
_lifetime.daemon = True
_lifetime.start()

ROOT = sys.argv[1]
counts = {}
lock = threading.Lock()

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_body(self, status, body, headers=None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        path = self.path.split("?")[0]
        if not path.startswith("/_count/"):
            with lock:
                key = f"{status} {path}"
                counts[key] = counts.get(key, 0) + 1

    def do_GET(self):
        path, _, query = self.path.partition("?")
        if path.startswith("/_count/"):
            status = dict(p.split("=", 1) for p in query.split("&") if "=" in p).get("status")
            key = path[len("/_count"):]
            with lock:
                n = counts.get(f"{status} {key}" if status else key, 0)
            return self.send_body(200, str(n).encode())
        with lock:
            counts[path] = counts.get(path, 0) + 1
        if path == "/hang":
            time.sleep(120)
            return
        if path == "/redirect-file":
            return self.send_body(302, b"", {"Location": "file:///etc/passwd"})
        if path.startswith("/not-modified/"):
            return self.send_body(304, b"")
        if path.startswith("/redirect-to/"):
            return self.send_body(302, b"", {"Location": path[len("/redirect-to/"):]})
        if path.startswith("/trickle/"):
            data = open(os.path.join(ROOT, path[len("/trickle/"):]), "rb").read()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            for b in data:
                self.wfile.write(bytes([b]))
                self.wfile.flush()
                time.sleep(1)
            return
        if path.startswith("/slow/"):
            data = open(os.path.join(ROOT, path[len("/slow/"):]), "rb").read()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            step = max(1, (len(data) + 19) // 20)
            for i in range(0, len(data), step):
                self.wfile.write(data[i:i + step])
                self.wfile.flush()
                time.sleep(0.1)
            return
        if path.startswith("/sig-fails/"):
            # The archive as it is; its signature answered with a server error.
            if path.endswith(".sig"):
                return self.send_body(500, b"the signature store is down")
            return self.send_body(200, open(os.path.join(ROOT, path[len("/sig-fails/"):]), "rb").read())
        if path.startswith("/truncated/"):
            data = open(os.path.join(ROOT, path[len("/truncated/"):]), "rb").read()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data) * 2))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
            self.close_connection = True
            return
        full = os.path.join(ROOT, path.lstrip("/"))
        if not os.path.isfile(full):
            return self.send_body(404, b"not found")
        data = open(full, "rb").read()
        etag = '"' + hashlib.sha256(data).hexdigest()[:16] + '"'
        mtime = os.path.getmtime(full)
        last_modified = email.utils.formatdate(mtime, usegmt=True)
        inm = self.headers.get("If-None-Match")
        ims = self.headers.get("If-Modified-Since")
        if inm == etag or (inm is None and ims and email.utils.parsedate_to_datetime(ims).timestamp() >= int(mtime)):
            return self.send_body(304, b"", {"ETag": etag, "Last-Modified": last_modified})
        self.send_body(200, data, {"ETag": etag, "Last-Modified": last_modified})

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
