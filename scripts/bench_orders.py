#!/usr/bin/env python3
"""Helpers for scripts/bench-orders.sh (standard library only).

  bench_orders.py latency BASE TOKEN ORG N        order-to-running latency, N orders one by one
  bench_orders.py nodes BASE OPERATOR_TOKEN N     add N simulated h100x8 nodes in us-east
  bench_orders.py fill BASE TOKEN ORG N           create N h100x8 orders, 16 at a time
  bench_orders.py cycles LOG                      scheduling cycle timings from a server log
"""
import concurrent.futures
import datetime
import json
import re
import statistics
import sys
import time
import urllib.request


def call(method, url, token, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


def ready(base):
    """Waits until the server at `base` answers /readyz."""
    for _ in range(1200):
        try:
            with urllib.request.urlopen(f"{base}/readyz", timeout=2):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"the server at {base} did not become ready")


def login(base, email, password):
    request = urllib.request.Request(f"{base}/api/v1/auth/login",
                                     data=json.dumps({"email": email, "password": password}).encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.load(reply)["access_token"]


def parse_time(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def latency(base, token, org, n):
    orders = f"{base}/api/v1/orgs/{org}/orders"
    server_ms, client_ms = [], []
    for _ in range(int(n)):
        began = time.monotonic()
        order = call("POST", orders, token, {"instance_type": "h100x1"})
        while order["status"] != "running":
            time.sleep(0.002)
            order = call("GET", f"{orders}/{order['id']}", token)
        client_ms.append((time.monotonic() - began) * 1000)
        server_ms.append(
            (parse_time(order["started_at"]) - parse_time(order["created_at"])).total_seconds() * 1000
        )
        call("POST", f"{orders}/{order['id']}/cancel", token, {})
        while call("GET", f"{orders}/{order['id']}", token)["placement"]:
            time.sleep(0.005)
    for name, values in (("server (created_at → started_at)", server_ms), ("client (POST → seen running)", client_ms)):
        print(
            f"{name}: n={len(values)} p50={statistics.median(values):.1f} ms "
            f"p95={percentile(values, 95):.1f} ms max={max(values):.1f} ms"
        )


def nodes(base, token, n):
    def add(i):
        call("POST", f"{base}/api/v1/admin/nodes", token,
             {"name": f"bench-{i:04d}", "region": "us-east", "instance_type": "h100x8"})
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(add, range(int(n))))
    print(f"added {n} nodes")


def fill(base, token, org, n):
    def order(_):
        call("POST", f"{base}/api/v1/orgs/{org}/orders", token, {"instance_type": "h100x8"})
    began = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(order, range(int(n))))
    print(f"created {n} orders in {time.monotonic() - began:.1f} s")


def cycles(log):
    rows = []
    for line in open(log, encoding="utf-8", errors="replace"):
        if "cycle timing" not in line:
            continue
        fields = dict(re.findall(r"(\w+)=([\d.]+)", re.sub(r"\x1b\[[0-9;]*m", "", line)))
        rows.append(fields)
    busy = [r for r in rows if int(r.get("pending", 0)) >= 1000]
    for label, subset in (("all cycles", rows), ("cycles with >= 1,000 pending", busy)):
        if not subset:
            continue
        last = subset[-1]
        total = [float(r["total_ms"]) for r in subset]
        print(
            f"{label}: n={len(subset)} total p50={statistics.median(total):.1f} ms max={max(total):.1f} ms; "
            f"last: pending={last['pending']} running={last['running']} nodes={last['nodes']} "
            f"load={float(last['load_ms']):.1f} decide={float(last['decide_ms']):.1f} "
            f"write={float(last['write_ms']):.1f} total={float(last['total_ms']):.1f} ms"
        )


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"latency": latency, "nodes": nodes, "fill": fill, "cycles": cycles}[command](*args)
