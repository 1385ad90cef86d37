#!/usr/bin/env python3
# A copy of ../shared/gpu/chrome/serve.py (the GPU-machine recipe), kept here so CI tests the exact
# server that runs the page where there is no Node.js.
"""Serve a built page on localhost and take the first POST as its result (for machines without Node.js).

usage: serve.py DIR PORT RESULT_FILE [TIMEOUT_S]
Serves DIR with COOP/COEP headers (fine timers, SharedArrayBuffer), writes the body of the first POST to
RESULT_FILE, then exits 0; exits 1 if no POST came within TIMEOUT_S (default 300).
"""
import http.server, os, sys, threading

root, port, result = sys.argv[1], int(sys.argv[2]), sys.argv[3]
timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 300
got = threading.Event()


class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k):
        super().__init__(*a, directory=root, **k)

    def end_headers(self):
        self.send_header('Cross-Origin-Opener-Policy', 'same-origin')
        self.send_header('Cross-Origin-Embedder-Policy', 'require-corp')
        self.send_header('Cache-Control', 'no-store')
        super().end_headers()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get('Content-Length', 0)))
        with open(result, 'wb') as f:
            f.write(body)
        self.send_response(204)
        self.end_headers()
        got.set()

    def log_message(self, fmt, *a):
        pass


srv = http.server.ThreadingHTTPServer(('127.0.0.1', port), Handler)
threading.Thread(target=srv.serve_forever, daemon=True).start()
ok = got.wait(timeout)
srv.shutdown()
sys.exit(0 if ok else 1)
