#!/usr/bin/env python3
"""The cost of one Prometheus scrape of /metrics at fleet scale, on a
release server with the demo cluster plus NODES agent nodes of 8 H100 GPUs
(each heartbeating telemetry for its GPUs, as real agents do), ORGS
organizations and ORDERS orders spread over them:

  1. the server scrape's size (bytes, series);
  2. wrk, one connection, DURATION seconds, against the server's private
     metrics listener: scrape latency and scrapes per second;
  3. the same wrk against /healthz of the same server, as the floor of one
     HTTP round trip on this machine in the same run;
  4. a real gantry-agent (8 simulated GPUs) joined to the same server: its
     own /metrics, where per-GPU telemetry lives, with the same wrk.

    cargo build --release && scripts/bench-metrics.py

GANTRY_BIN (default target/release/gantry), GANTRY_AGENT_BIN (default
target/release/gantry-agent), NODES (default 1000), ORGS (default 20),
ORDERS (default 10000), DURATION (default 10).
"""

import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_orders import call, login, ready  # noqa: E402

BIN = os.environ.get("GANTRY_BIN", "target/release/gantry")
AGENT_BIN = os.environ.get("GANTRY_AGENT_BIN", "target/release/gantry-agent")
NODES = int(os.environ.get("NODES", "1000"))
ORGS = int(os.environ.get("ORGS", "20"))
ORDERS = int(os.environ.get("ORDERS", "10000"))
DURATION = int(os.environ.get("DURATION", "10"))
PORT, METRICS_PORT, AGENT_METRICS_PORT = 18303, 18304, 18305
BASE = f"http://127.0.0.1:{PORT}"
METRICS = f"http://127.0.0.1:{METRICS_PORT}/metrics"
OPERATOR = ("operator@demo.gantry.dev", "gantry operator demo")


def gantry():
    env = dict(os.environ, GANTRY_DATA_DIR=tempfile.mkdtemp(), GANTRY_LISTEN=f"127.0.0.1:{PORT}",
               GANTRY_METRICS_LISTEN=f"127.0.0.1:{METRICS_PORT}",
               GANTRY_JWT_SECRET="metrics-bench-secret-0123456789abcdef",
               GANTRY_MAX_WAITING_ORDERS=str(ORDERS),
               GANTRY_AGENT_HEARTBEAT_DEADLINE_SECONDS="3600",
               GANTRY_RATE_LIMIT_PER_SECOND="1000000", GANTRY_RATE_LIMIT_BURST="1000000",
               RUST_LOG="warn")
    env.pop("DATABASE_URL", None)
    return subprocess.Popen([BIN, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def join_agents(operator):
    token = call("POST", f"{BASE}/api/v1/admin/join-tokens", operator, {"region": "us-east"})["token"]

    def join(i):
        name = f"agent-{i:04d}"
        gpus = [{"index": g, "model": "H100-SXM-80GB", "uuid": f"GPU-{name}-{g}", "memory_mib": 81920,
                 "nvlink_domain": g // 4, "mig_enabled": False} for g in range(8)]
        node = call("POST", f"{BASE}/api/v1/agent/register", token,
                    {"name": name, "cpu_milli": 192000, "memory_mib": 2097152, "gpus": gpus})
        samples = [{"index": g, "utilization_pct": 90, "memory_used_mib": 40960, "temperature_c": 65,
                    "power_w": 600} for g in range(8)]
        call("POST", f"{BASE}/api/v1/agent/heartbeat", node["credential"], {"gpus": samples})
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(join, range(NODES)))


def place_orders():
    def tenant(i):
        email = f"bench-{i}@example.com"
        password = "ochre lantern quarry 41"
        body = {"email": email, "password": password, "name": f"Bench {i}", "organization": f"Bench org {i}"}
        request = urllib.request.Request(f"{BASE}/api/v1/auth/signup", data=json.dumps(body).encode(),
                                         headers={"content-type": "application/json"})
        urllib.request.urlopen(request, timeout=30).close()
        token = login(BASE, email, password)
        org = call("GET", f"{BASE}/api/v1/orgs", token)["items"][0]["id"]
        for n in range(ORDERS // ORGS):
            call("POST", f"{BASE}/api/v1/orgs/{org}/orders", token,
                 {"instance_type": "h100x1", "priority_class": ("standard", "batch")[n % 2]})
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(tenant, range(ORGS)))


def wrk(url):
    out = subprocess.run(["wrk", "-t1", "-c1", f"-d{DURATION}s", "--latency", url],
                         check=True, capture_output=True, text=True).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = re.search(r"50%\s+([\d.]+\w+)", out).group(1)
    p99 = re.search(r"99%\s+([\d.]+\w+)", out).group(1)
    return rate, p50, p99


def scrape(url):
    with urllib.request.urlopen(url, timeout=30) as reply:
        text = reply.read().decode()
    return text, [line for line in text.splitlines() if line and not line.startswith("#")]


def agent(operator):
    """A real agent with 8 simulated GPUs and its own metrics listener."""
    token = call("POST", f"{BASE}/api/v1/admin/join-tokens", operator, {"region": "us-east"})["token"]
    env = dict(os.environ, GANTRY_JOIN_TOKEN=token, RUST_LOG="warn")
    return subprocess.Popen(
        [AGENT_BIN, "--server", BASE, "--name", "bench-agent", "--runtime", "process",
         "--simulate-gpus", "8xH100-SXM-80GB", "--state-dir", tempfile.mkdtemp(),
         "--metrics-listen", f"127.0.0.1:{AGENT_METRICS_PORT}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    server = gantry()
    node = None
    try:
        ready(BASE)
        operator = login(BASE, *OPERATOR)
        started = time.time()
        join_agents(operator)
        place_orders()
        print(f"seeded {NODES} agent nodes and {ORDERS} orders in {time.time() - started:.0f} s")
        # Two publishes of the leader's gauges.
        time.sleep(12)
        text, series = scrape(METRICS)
        pending = sum(float(line.rsplit(" ", 1)[1]) for line in series if line.startswith("gantry_pending_orders{"))
        print(f"server scrape: {len(text)} bytes, {len(series)} series, {pending:.0f} orders waiting")
        rate, p50, p99 = wrk(METRICS)
        floor, floor_p50, floor_p99 = wrk(f"{BASE}/healthz")
        print(f"server /metrics: {rate:.0f} scrapes/s, p50 {p50}, p99 {p99}")
        print(f"server /healthz: {floor:.0f} req/s, p50 {floor_p50}, p99 {floor_p99}")
        print(f"ratio: one scrape costs {floor / rate:.1f} health checks")

        node = agent(operator)
        url = f"http://127.0.0.1:{AGENT_METRICS_PORT}/metrics"
        for _ in range(100):
            try:
                text, series = scrape(url)
                if sum(1 for line in series if line.startswith("gantry_gpu_utilization_ratio{")) == 8:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        print(f"agent scrape: {len(text)} bytes, {len(series)} series")
        rate, p50, p99 = wrk(url)
        print(f"agent /metrics: {rate:.0f} scrapes/s, p50 {p50}, p99 {p99}")
    finally:
        for process in (node, server):
            if process:
                process.terminate()
                process.wait()


if __name__ == "__main__":
    main()
