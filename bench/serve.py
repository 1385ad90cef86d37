#!/usr/bin/env python3
# The server that runs the page on the GPU machines, where there is no Node.js (bench/README.md);
# CI tests it here.
"""Serve a built page on localhost and take the first POST as its result (for machines without Node.js).

usage: serve.py DIR PORT RESULT_FILE [TIMEOUT_S]
Serves DIR with COOP/COEP headers (fine timers, SharedArrayBuffer), writes the body of the first POST to
RESULT_FILE, then exits 0; exits 1 if no POST came within TIMEOUT_S (default 300).
Also serves the synthetic weights file of the "weights from storage" scenario at
/weights/synthetic.safetensors?layers=L&elements=N&seed=S in byte ranges, the same bytes as
bench/weights-file.ts makes.
"""
import atexit, hashlib, http.server, json, os, re, signal, sys, tempfile, threading, urllib.parse

root, port, result = sys.argv[1], int(sys.argv[2]), sys.argv[3]
timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 300
got = threading.Event()
WEIGHTS_PATH = '/weights/synthetic.safetensors'
# Each float's top byte keeps its sign and gets exponent bits 0111111x: magnitude in [0.5, 2).
TOP_BYTE = bytes((b & 0x80) | 0x3F for b in range(256))
weights_lock = threading.Lock()
# The weights files this server wrote: removed when it exits (also on SIGTERM / SIGINT).
written = []
atexit.register(lambda: [os.remove(p) for p in written if os.path.exists(p)])
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda n, _f: sys.exit(128 + n))


def weights_spec(query):
    q = urllib.parse.parse_qs(query)
    try:
        layers, elements, seed = (int(q[k][0]) for k in ('layers', 'elements', 'seed'))
    except (KeyError, ValueError):
        return None
    if not (1 <= layers <= 256 and elements >= 1 and 0 <= seed <= 0xFFFFFFFF and layers * elements * 4 <= 2 ** 31):
        return None
    return layers, elements, seed


def safetensors_header(layers, elements):
    meta, at = {}, 0
    for i in range(layers):
        meta[f'layers.{i}.weight'] = {'dtype': 'F32', 'shape': [elements], 'data_offsets': [at, at + elements * 4]}
        at += elements * 4
    text = json.dumps(meta, separators=(',', ':')).encode()
    text += b' ' * (-len(text) % 8)
    return len(text).to_bytes(8, 'little') + text


def weights_file(layers, elements, seed):
    """The file in the temp directory, written once per server (same spec, same bytes); its path."""
    path = os.path.join(tempfile.gettempdir(), f'webgpu-streams-weights-{seed}-{layers}x{elements}.safetensors')
    with weights_lock:
        if not os.path.exists(path):
            part = f'{path}.{os.getpid()}.part'
            with open(part, 'wb') as f:
                f.write(safetensors_header(layers, elements))
                for i in range(layers):
                    b = bytearray(hashlib.shake_256(f'webgpu-streams weights {seed} {i}'.encode()).digest(elements * 4))
                    b[3::4] = b[3::4].translate(TOP_BYTE)
                    f.write(b)
            os.replace(part, path)
            written.append(path)
    return path


class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k):
        super().__init__(*a, directory=root, **k)

    def end_headers(self):
        self.send_header('Cross-Origin-Opener-Policy', 'same-origin')
        self.send_header('Cross-Origin-Embedder-Policy', 'require-corp')
        self.send_header('Cache-Control', 'no-store')
        super().end_headers()

    def send_weights(self, head):
        url = urllib.parse.urlsplit(self.path)
        spec = weights_spec(url.query)
        if spec is None:
            self.send_error(400, 'expected ?layers=1..256&elements=N&seed=S (at most 2 GiB)')
            return
        path = weights_file(*spec)
        size = os.path.getsize(path)
        m = re.fullmatch(r'bytes=(\d+)-(\d*)', self.headers.get('Range', ''))
        start, end = (int(m.group(1)), min(int(m.group(2)), size - 1) if m.group(2) else size - 1) if m else (0, size - 1)
        if m and (start > end or start >= size):
            self.send_response(416)
            self.send_header('Content-Range', f'bytes */{size}')
            self.end_headers()
            return
        self.send_response(206 if m else 200)
        self.send_header('Content-Type', 'application/octet-stream')
        self.send_header('Accept-Ranges', 'bytes')
        self.send_header('Content-Length', str(end - start + 1))
        if m:
            self.send_header('Content-Range', f'bytes {start}-{end}/{size}')
        self.end_headers()
        if head:
            return
        with open(path, 'rb') as f:
            f.seek(start)
            left = end - start + 1
            while left > 0:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)

    def do_GET(self):
        if urllib.parse.urlsplit(self.path).path == WEIGHTS_PATH:
            return self.send_weights(False)
        return super().do_GET()

    def do_HEAD(self):
        if urllib.parse.urlsplit(self.path).path == WEIGHTS_PATH:
            return self.send_weights(True)
        return super().do_HEAD()

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
