"""The images' health check: `healthcheck.py PATH DEFAULT_PORT` asks PATH on the port the container's forklift
listens on (its --port, read from PID 1's command line, so an instance started on another port, as
`forklift plan --emit podman` starts them, is checked where it listens). Exit 0 when it answers 200."""

import sys
import urllib.request

path, default = sys.argv[1], sys.argv[2]
with open("/proc/1/cmdline", "rb") as cmdline:
    words = cmdline.read().decode().split("\0")
port = words[words.index("--port") + 1] if "--port" in words else default
try:
    urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=4)
except OSError as exc:
    sys.exit(f"{path} on port {port}: {exc}")
