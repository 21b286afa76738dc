#!/usr/bin/env python3
"""Replays one generated access log through Varnish (default VCL, best-practice VCL) and
through the Cachet edge app in Viceroy, each in front of a fresh demo origin, and reports
requests, origin requests and hit ratio for each. Run by scripts/compare-varnish, which
builds the binaries and passes their paths.

The replay is sequential and time-compressed (requests are sent back to back, not at the
log's timestamps), so TTLs do not expire during it: the comparison isolates what each
setup stores and how it keys it (device class, query normalization, private content).
Hit ratio = 1 - origin requests / requests, measured at the origin (/__origin/stats), the
same way for every setup.
"""

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

LINE = re.compile(
    r'^(?P<vhost>\S+) \S+ \S+ \S+ \[[^\]]+\] "(?P<method>\S+) (?P<target>\S+) [^"]*" '
    r'(?P<status>\d{3}) \S+ "[^"]*" "(?P<ua>[^"]*)"(?: "(?P<cc>[^"]*)")?')


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=120.0):
    """Waits until `port` accepts connections (bounded), failing if `proc` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{what} exited with status {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{what} did not listen on {port} within {timeout}s")


def parse_log(path):
    requests, blogs, private = [], set(), set()
    bad = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if not m or m["method"] not in ("GET", "HEAD"):
                bad += 1
                continue
            host = m["vhost"].rsplit(":", 1)[0]
            target = m["target"]
            requests.append((host, target, m["ua"]))
            b = re.match(r"^/(?:blog|css)/([A-Za-z0-9_-]+?)(?:\.css)?(?:/|$|\?)", target)
            if b:
                blogs.add(b[1])
                if (m["cc"] or "").startswith("private") and target.startswith("/blog/"):
                    private.add(b[1])
    return requests, blogs, private, bad


def replay(port, requests):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    xcache, errors = {}, 0
    for host, target, ua in requests:
        try:
            conn.request("GET", target, headers={"Host": host, "User-Agent": ua,
                                                 "Accept-Encoding": "gzip"})
            resp = conn.getresponse()
            resp.read()
            x = resp.getheader("X-Cache") or ("hit" if resp.getheader("Age", "0") != "0" else "-")
            xcache[x] = xcache.get(x, 0) + 1
            if resp.getheader("Connection", "").lower() == "close":
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        except (OSError, http.client.HTTPException):
            errors += 1
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.close()
    return xcache, errors


def origin_stats(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/__origin/stats")
    stats = json.loads(conn.getresponse().read())
    conn.close()
    return stats


def reset_origin(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/__origin/stats/reset")
    conn.getresponse().read()
    conn.close()


def stop(proc):
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_target(name, args, requests, blogs_flag, work):
    oport = free_port()
    origin = subprocess.Popen([args.origin, "--listen", f"127.0.0.1:{oport}",
                               "--blogs", blogs_flag], stdout=subprocess.DEVNULL)
    target = None
    try:
        wait_port(oport, origin, "demo origin")
        port = free_port()
        if name.startswith("varnish"):
            vcl_src = os.path.join(args.root, "scripts/varnish",
                                   "default.vcl" if name == "varnish-default" else "best-practice.vcl")
            vdir = os.path.join(work, name)
            os.makedirs(vdir, exist_ok=True)
            os.chmod(vdir, 0o755)
            vcl = os.path.join(vdir, "site.vcl")
            with open(vcl_src) as f, open(vcl, "w") as out:
                out.write(f.read().replace("ORIGIN_PORT", str(oport)))
            os.chmod(vcl, 0o644)
            target = subprocess.Popen(
                ["varnishd", "-F", "-a", f"127.0.0.1:{port}", "-T", f"127.0.0.1:{free_port()}",
                 "-n", os.path.join(vdir, "n"), "-f", vcl, "-s", "malloc,256m"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        else:
            manifest = os.path.join(work, "fastly.toml")
            with open(os.path.join(args.root, "fastly.toml")) as f, open(manifest, "w") as out:
                out.write(f.read().replace("http://127.0.0.1:8080", f"http://127.0.0.1:{oport}"))
            target = subprocess.Popen([args.viceroy, "serve", "-C", manifest, "--addr",
                                       f"127.0.0.1:{port}", args.wasm],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(port, target, name)
        reset_origin(oport)  # Viceroy probes its backends with GET / at start
        started = time.monotonic()
        xcache, errors = replay(port, requests)
        elapsed = time.monotonic() - started
        stats = origin_stats(oport)
    finally:
        stop(target)
        stop(origin)
    n = len(requests)
    return {
        "setup": name, "requests": n, "origin_requests": stats["total"],
        "hit_ratio": 1 - stats["total"] / n if n else 0.0, "errors": errors,
        "seconds": round(elapsed, 1), "x_cache": xcache,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--log", required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--origin", required=True, help="cachet-demo-origin binary")
    p.add_argument("--viceroy", required=True)
    p.add_argument("--wasm", required=True, help="cachet-edge.wasm")
    p.add_argument("--json", help="write the results here too")
    args = p.parse_args()
    if not shutil.which("varnishd"):
        raise SystemExit("varnishd not found (scripts/compare-varnish installs it)")
    requests, blogs, private, bad = parse_log(args.log)
    blogs_flag = ",".join(sorted(b + (":private" if b in private else "") for b in blogs))
    print(f"replaying {len(requests)} requests ({bad} lines skipped); blogs: {blogs_flag}",
          file=sys.stderr)
    results = []
    with tempfile.TemporaryDirectory() as work:
        os.chmod(work, 0o755)
        for name in ("varnish-default", "varnish-best-practice", "cachet"):
            r = run_target(name, args, requests, blogs_flag, work)
            print(f"{name}: {r}", file=sys.stderr)
            results.append(r)
    print("| setup | requests | origin requests | hit ratio | replay time |")
    print("|---|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['setup']} | {r['requests']} | {r['origin_requests']} | "
              f"{100 * r['hit_ratio']:.1f}% | {r['seconds']} s |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
