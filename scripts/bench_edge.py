#!/usr/bin/env python3
"""The edge benchmark's runner (scripts/bench-edge sets it up): Viceroy rows side by side.

Each row starts one Viceroy (pinned to the server core) with one wasm in front of the demo
origin (also on the server core), drives it with wrk (pinned to the other core, keep-alive),
and reads the Viceroy process's CPU time from /proc before and after the measured run:
server CPU per response = (utime + stime delta) / responses. Rows:

  null-fresh     a do-nothing Compute app, one fresh instance per request (bench/null-app)
  null-reused    the same in a reusable sandbox (fastly::http::serve)
  cachet-hit     the edge app, HIT on cdn.example/css/alice.css for a gzip client
  cachet-hit-fresh  the same from a wasm built with [edge].sandbox_max_requests = 1 in its
                 built-in configuration (pre-initialized: a fresh instance each request)
  cachet-hit-fresh-store  a fresh instance each request, the configuration (with that
                 bound) from the config store: each instance builds its policy
  cachet-robots  the edge app's synthesized /robots.txt (no cache)
  cachet-bans    the edge app's admin ban list (GET /.cachet/bans with the token)
  null-cache     the floor of a core-cache HIT: reads the request, one core-cache
                 transaction, the stored body, Cachet's 13 header lines and one access-log
                 line of the same length, in a reusable sandbox; no policy (bench/null-app)
  null-forward   a do-nothing app forwarding each request to the origin (unique URLs)
  cachet-miss    the edge app, every request a new URL (origin fetch, gzip, store)

Before measuring, each row is probed (status, X-Cache); after it, wrk must report no
non-2xx answer, else the run fails naming the row. Prints a Markdown table (and JSON with
--json PATH). Exit 0 on success, 1 when a row fails its checks, 2 on a setup problem.
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

TOKEN = "bench-edge-admin-token-0123456789abcdef"
CLK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=60.0):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"{what} exited before listening (status {proc.returncode})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{what} did not listen on {port} within {timeout} s")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime, stime: fields 14 and 15 of stat(5), 12 and 13 after the command name.
    return (int(fields[11]) + int(fields[12])) / CLK


def get(port, host, path, headers):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Host": host, **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def manifest(origin_port, config):
    text = (
        'manifest_version = 3\nname = "cachet-bench-edge"\nlanguage = "rust"\n\n'
        "[local_server]\n[local_server.backends.origin]\n"
        f'url = "http://127.0.0.1:{origin_port}"\n'
        "[local_server.kv_stores]\ncachet_bans = []\n"
        "[[local_server.secret_stores.cachet_secrets]]\n"
        f'key = "admin_token"\ndata = "{TOKEN}"\n'
    )
    if config is not None:
        text += (
            '\n[local_server.config_stores.cachet]\nformat = "inline-toml"\n'
            "[local_server.config_stores.cachet.contents]\n"
            f"config = {json.dumps(config)}\n"
        )
    return text


def wrk(args, port, host, path, headers, seconds, lua, prefix):
    cmd = ["taskset", "-c", args.load_cpu, "wrk", "-t1", f"-c{args.connections}",
           f"-d{seconds}s", "--latency", "-H", f"Host: {host}"]
    for k, v in headers.items():
        cmd += ["-H", f"{k}: {v}"]
    if lua:
        cmd += ["-s", lua]
    cmd.append(f"http://127.0.0.1:{port}{path}")
    if lua:
        cmd += ["--", prefix]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)

    def pct(p):
        m = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        if not m:
            return None
        v, u = float(m.group(1)), m.group(2)
        return v / 1000 if u == "us" else (v if u == "ms" else v * 1000)

    return {"requests": reqs, "rps": rps, "non2xx": int(non2xx.group(1)) if non2xx else 0,
            "p50_ms": pct(50), "p99_ms": pct(99)}


ROWS = [
    # id, wasm key, host, path, headers, expected X-Cache after warm-up, unique URLs, config
    ("null-fresh", "null_fresh", "cdn.example", "/css/alice.css", {}, None, False, None),
    ("null-reused", "null_reused", "cdn.example", "/css/alice.css", {}, None, False, None),
    ("null-cache", "null_cache", "cdn.example", "/css/alice.css", {"Accept-Encoding": "gzip"}, None, False, None),
    ("cachet-hit", "edge", "cdn.example", "/css/alice.css", {"Accept-Encoding": "gzip"}, "HIT", False, None),
    ("cachet-hit-fresh", "edge_fresh", "cdn.example", "/css/alice.css", {"Accept-Encoding": "gzip"}, "HIT", False, None),
    ("cachet-hit-fresh-store", "edge", "cdn.example", "/css/alice.css", {"Accept-Encoding": "gzip"}, "HIT", False, "fresh"),
    ("cachet-robots", "edge", "cdn.example", "/robots.txt", {}, "SYNTH", False, None),
    ("cachet-bans", "edge", "cdn.example", "/.cachet/bans", {"Authorization": f"Bearer {TOKEN}"}, "SYNTH", False, None),
    ("null-forward", "null_forward", "cdn.example", "/css/alice.css", {"Accept-Encoding": "gzip"}, None, True, None),
    ("cachet-miss", "edge", "cdn.example", "/css/alice.css", {"Accept-Encoding": "gzip"}, "MISS", True, None),
]


def run_row(args, row, wasm, origin_port, builtin):
    rid, key, host, path, headers, want, unique, cfg = row
    config = None
    if cfg == "fresh":
        config = re.sub(r"sandbox_max_requests = \d+", "sandbox_max_requests = 1", builtin)
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        mpath = os.path.join(d, "fastly.toml")
        with open(mpath, "w") as f:
            f.write(manifest(origin_port, config))
        log = open(os.path.join(d, "viceroy.log"), "w")
        proc = subprocess.Popen(
            ["taskset", "-c", args.server_cpu, args.viceroy, "serve", "-C", mpath,
             "--addr", f"127.0.0.1:{port}", wasm[key]],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "error"})
        try:
            wait_port(port, proc, f"viceroy ({rid})")
            probe_path = path + ("?bench=probe" if unique else "")
            status, h, body = get(port, host, probe_path, headers)
            if want and want not in ("MISS",):
                status, h, body = get(port, host, probe_path, headers)
            xc = h.get("X-Cache") or h.get("x-cache")
            if status != 200 or (want and xc != want):
                return rid, None, f"probe: status {status}, X-Cache {xc!r} (want 200, {want})"
            lua = os.path.join(args.root, "bench/load/unique.lua") if unique else None
            if args.warmup > 0:
                wrk(args, port, host, path, headers, args.warmup, lua, f"w{rid}")
            before = cpu_seconds(proc.pid)
            r = wrk(args, port, host, path, headers, args.duration, lua, f"m{rid}")
            after = cpu_seconds(proc.pid)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()
    r["body_bytes"] = len(body)
    if r["non2xx"]:
        return rid, r, f"{r['non2xx']} non-2xx answers"
    r["cpu_us"] = (after - before) * 1e6 / max(r["requests"], 1)
    return rid, r, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--viceroy", required=True)
    ap.add_argument("--origin", required=True)
    ap.add_argument("--edge", required=True)
    ap.add_argument("--edge-fresh", required=True)
    ap.add_argument("--null-fresh", required=True)
    ap.add_argument("--null-reused", required=True)
    ap.add_argument("--null-forward", required=True)
    ap.add_argument("--null-cache", required=True)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--server-cpu", default=os.environ.get("BENCH_SERVER_CPU", "0"))
    ap.add_argument("--load-cpu", default=os.environ.get("BENCH_LOAD_CPU", "1"))
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    wasm = {"edge": args.edge, "edge_fresh": args.edge_fresh, "null_fresh": args.null_fresh,
            "null_reused": args.null_reused, "null_forward": args.null_forward, "null_cache": args.null_cache}
    with open(os.path.join(args.root, "edge-app/cachet.toml")) as f:
        builtin = f.read()
    origin_port = free_port()
    origin = subprocess.Popen(
        ["taskset", "-c", args.server_cpu, args.origin, "--listen", f"127.0.0.1:{origin_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results, failures = {}, []
    try:
        wait_port(origin_port, origin, "demo origin")
        only = set(filter(None, args.only.split(",")))
        for row in ROWS:
            if only and row[0] not in only:
                continue
            print(f"==> {row[0]}", file=sys.stderr)
            rid, r, err = run_row(args, row, wasm, origin_port, builtin)
            if err:
                failures.append(f"{rid}: {err}")
            if r:
                results[rid] = r
    finally:
        origin.terminate()
        origin.wait(timeout=10)
    report(results, args)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    return 0


def report(results, args):
    def ratio(a, b):
        ra, rb = results.get(a), results.get(b)
        if not ra or not rb or "cpu_us" not in ra or "cpu_us" not in rb:
            return None
        return ra["cpu_us"] / rb["cpu_us"]

    print(f"Viceroy, server on core {args.server_cpu}, wrk on core {args.load_cpu} "
          f"({args.connections} connections, {args.duration} s after {args.warmup} s warm-up)\n")
    print("| row | body bytes | req/s | server CPU µs/response | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for rid, r in results.items():
        cpu = f"{r['cpu_us']:.0f}" if "cpu_us" in r else "—"
        p50 = f"{r['p50_ms']:.2f}" if r["p50_ms"] is not None else "—"
        p99 = f"{r['p99_ms']:.2f}" if r["p99_ms"] is not None else "—"
        print(f"| {rid} | {r.get('body_bytes', '—')} | {r['rps']:.0f} | {cpu} | {p50} | {p99} |")
    ratios = {
        "HIT / do-nothing (reused)": ratio("cachet-hit", "null-reused"),
        "HIT / core-cache floor (null-cache)": ratio("cachet-hit", "null-cache"),
        "core-cache floor / do-nothing (reused)": ratio("null-cache", "null-reused"),
        "robots.txt / do-nothing (reused)": ratio("cachet-robots", "null-reused"),
        "MISS / do-nothing forward": ratio("cachet-miss", "null-forward"),
        "HIT fresh instance / HIT reused": ratio("cachet-hit-fresh", "cachet-hit"),
        "HIT fresh instance, config-store policy / HIT reused": ratio("cachet-hit-fresh-store", "cachet-hit"),
        "do-nothing fresh / reused": ratio("null-fresh", "null-reused"),
    }
    print("\n| ratio (server CPU per response) | value |")
    print("|---|---:|")
    for k, v in ratios.items():
        print(f"| {k} | {'—' if v is None else f'{v:.2f}×'} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": results, "ratios": ratios}, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
