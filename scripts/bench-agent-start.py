#!/usr/bin/env python3
"""From an order's POST to its workload running on an idle agent node, over
real HTTP: a `gantry serve` on SQLite, one real `gantry-agent` with four
simulated H100s running its workloads in the sandbox runtime, ROUNDS orders
one after another (each cancelled and released before the next). "Running"
is what the tenant sees: the agent has started the process and reported it.

    cargo build --release && scripts/bench-agent-start.py

GANTRY_BIN_DIR (default target/release), ROUNDS (default 20), AGENT_ARGS
(extra agent flags, e.g. "--interval-ms 200") apply. The workloads run in
an image: AGENT_ARGS names it and its registry ("--default-image
127.0.0.1:5000/gantry-test/debian:bookworm --insecure-registry
127.0.0.1:5000"; scripts/test-fixtures.sh builds that image).
"""

import json
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request

BIN = os.environ.get("GANTRY_BIN_DIR", "target/release")
ROUNDS = int(os.environ.get("ROUNDS", "20"))
PORT = 18131
BASE = f"http://127.0.0.1:{PORT}/api/v1"
PASSWORD = "agent start correct horse"
data = tempfile.mkdtemp()
env = dict(os.environ, GANTRY_DATA_DIR=data, GANTRY_LISTEN=f"127.0.0.1:{PORT}", GANTRY_DEMO="false",
           GANTRY_RATE_LIMIT_PER_SECOND="100000", GANTRY_RATE_LIMIT_BURST="100000")
env.pop("DATABASE_URL", None)


def call(method, path, body=None, token=None):
    request = urllib.request.Request(BASE + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"content-type": "application/json"})
    if token:
        request.add_header("authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.load(reply)


server = subprocess.Popen([f"{BIN}/gantry", "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
agent = None
try:
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/readyz", timeout=1)
            break
        except OSError:
            time.sleep(0.05)
    operator = {"email": "op@example.com", "password": PASSWORD}
    call("POST", "/auth/signup", dict(operator, name="Op", organization="Op"))
    subprocess.run([f"{BIN}/gantry", "admin", "create-operator", "--email", operator["email"], "--password", PASSWORD],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    op = call("POST", "/auth/login", operator)["access_token"]
    call("POST", "/admin/catalog/regions", {"name": "lab", "display_name": "Lab", "time_zone": "UTC"}, op)
    call("POST", "/admin/catalog/gpu-models",
         {"name": "H100-SXM-80GB", "vendor": "NVIDIA", "memory_gib": 80, "interconnect": "nvlink"}, op)
    kind = call("POST", "/admin/catalog/instance-types",
                {"name": "h100x1", "gpu_model": "H100-SXM-80GB", "gpus_per_node": 1, "vcpus": 1, "memory_gib": 1}, op)
    call("POST", f"/admin/catalog/instance-types/{kind['id']}/prices",
         {"pricing_class": "on_demand", "hourly_micros": 2_000_000}, op)
    join = call("POST", "/admin/join-tokens", {"region": "lab"}, op)["token"]
    agent = subprocess.Popen(
        [f"{BIN}/gantry-agent", "--server", f"http://127.0.0.1:{PORT}", "--name", "bench-1",
         "--simulate-gpus", "4xH100-SXM-80GB", "--state-dir", os.path.join(data, "agent"),
         "--workload-command", "sleep 3600", "--image-store-gib", "4", "--default-disk-gib", "1",
         "--disk-reserve-gib", "1", *os.environ.get("AGENT_ARGS", "").split()],
        env=dict(os.environ, GANTRY_JOIN_TOKEN=join), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        if any(n["state"] == "ready" for n in call("GET", "/admin/nodes", token=op)["items"]):
            break
        time.sleep(0.05)
    tenant = {"email": "t@example.com", "password": PASSWORD}
    signed = call("POST", "/auth/signup", dict(tenant, name="T", organization="T"))
    token, org = signed["access_token"], signed["organization"]["id"]
    took = []
    for _ in range(ROUNDS):
        began = time.monotonic()
        order = call("POST", f"/orgs/{org}/orders", {"instance_type": "h100x1"}, token)
        while call("GET", f"/orgs/{org}/orders/{order['id']}", token=token)["status"] != "running":
            time.sleep(0.002)
        took.append((time.monotonic() - began) * 1000)
        call("POST", f"/orgs/{org}/orders/{order['id']}/cancel", {}, token)
        while call("GET", f"/orgs/{org}/orders/{order['id']}", token=token).get("ended_at") is None:
            time.sleep(0.01)
    took.sort()
    print(f"POST -> running over {ROUNDS} orders: p50 {statistics.median(took):.0f} ms, "
          f"p90 {took[int(0.9 * (len(took) - 1))]:.0f} ms, min {took[0]:.0f} ms, max {took[-1]:.0f} ms")
finally:
    if agent:
        agent.terminate()
        agent.wait()
    server.terminate()
    server.wait()
