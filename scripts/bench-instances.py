#!/usr/bin/env python3
"""An instance from its order to SSH answering, on both runtimes, beside a
plain `podman run` of the same image in the same run; disk writes inside
an instance beside the node's own disk; and sequential writes and reads
on a local volume inside a `sandbox` instance beside the node's disk, and
on a shared volume beside the same GlusterFS mount used directly.

    cargo build --release && scripts/bench-instances.py

A `gantry serve` on SQLite, one real `gantry-agent` per runtime (four
simulated H100s, an image store of its own that starts empty), the test
image from scripts/test-fixtures.sh (Debian 12 with Python, 260 MiB)
served by Debian's docker-registry on this machine. For each runtime: the
first instance pulls the image (first-pulled); ROUNDS more find it cached.
Timed from the order's POST until `ssh root@… true` succeeds. The peer:
`podman run --rm <image> true` with runc, from an empty store (pull
included) and from a store that has it. Then `dd` of 1 GiB with fdatasync
inside an instance (its 10 GiB disk: ext4 on a loop device, under the
overlay) and on the node's disk where the agent keeps its state. The
`sandbox` agent's last instance attaches a 4 GiB local volume at /vol:
`dd` of 1 GiB with fdatasync into it and back out with direct I/O, beside
the same two on the node's disk; and a 4 GiB shared volume at /shared on
the GlusterFS volume of scripts/test-glusterfs.sh (one brick on this
machine, FUSE client), the same two beside the same two on that mount.

Needs root, podman, runc, bubblewrap, lxcfs, docker-registry, ssh and
GlusterFS (glusterfs-server, glusterfs-client).
GANTRY_BIN_DIR (default target/release) and ROUNDS (default 10) apply.
"""

import os
import shutil
import statistics
import subprocess
import tempfile
import time

from bench_lab import Lab, ssh

BIN = os.environ.get("GANTRY_BIN_DIR", "target/release")
ROUNDS = int(os.environ.get("ROUNDS", "10"))
PASSWORD = "instance bench correct horse"
work = tempfile.mkdtemp(prefix="gantry-bench-instances-")
# Workloads' setup passes through to the agents' state directories inside.
os.chmod(work, 0o711)
lab = Lab(BIN, work)
call = lab.call


def summary(values):
    values = sorted(values)
    return (f"p50 {statistics.median(values):.0f} ms, p95 {values[int(0.95 * (len(values) - 1))]:.0f} ms"
            if len(values) > 1 else f"{values[0]:.0f} ms")


def podman_run(store, image, pull):
    command = ["podman", "--root", f"{store}/root", "--runroot", f"{store}/run", "--runtime", "runc",
               "--cgroup-manager", "cgroupfs", "--events-backend", "file", "run", "--rm", "--tls-verify=false",
               "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096", "--network", "none",
               image, "true"]
    if not pull:
        command.insert(command.index("run") + 1, "--pull=never")
    began = time.monotonic()
    subprocess.run(command, check=True, capture_output=True)
    return (time.monotonic() - began) * 1000


def dd(run):
    out = run("dd if=/dev/zero of=bench.dd bs=1M count=1024 conv=fdatasync 2>&1; rm -f bench.dd")
    line = [l for l in out.splitlines() if "copied" in l][-1]
    return line.split(",")[-1].strip()


def dd_both(run):
    """A 1 GiB write with fdatasync, then the same read back with direct I/O."""
    out = run("dd if=/dev/zero of=bench.dd bs=1M count=1024 conv=fdatasync 2>&1; "
              "dd if=bench.dd of=/dev/null bs=1M iflag=direct 2>&1; rm -f bench.dd")
    rates = [l.split(",")[-1].strip() for l in out.splitlines() if "copied" in l]
    return rates[0], rates[1]


try:
    registry, images = lab.registry()
    image = f"{registry}/{images['base']}"
    gluster = subprocess.run([os.path.join(os.path.dirname(__file__), "test-glusterfs.sh")],
                             check=True, capture_output=True, text=True).stdout.strip()
    corner = os.path.join(gluster, f"bench-{os.getpid()}")
    os.makedirs(corner)
    shared = os.path.join(work, "shared")
    os.makedirs(shared)
    subprocess.run(["mount", "--bind", corner, shared], check=True)

    op = lab.serve(PASSWORD)
    lab.instance_type(op, "h100x1", 1, 1, 10)
    call("PUT", "/admin/catalog/image-policy", {"allowed_prefixes": [registry]}, op)
    call("PUT", "/admin/shared-file-systems", {"region": "lab", "kind": "glusterfs", "mount_path": shared}, op)
    token, org, key = lab.tenant(PASSWORD)

    rows = []
    for runtime in ["sandbox", "oci"]:
        join = call("POST", "/admin/join-tokens", {"region": "lab"}, op)["token"]
        state = os.path.join(work, f"agent-{runtime}")
        agent = lab.start([f"{BIN}/gantry-agent", "--server", f"http://127.0.0.1:{lab.port}",
                           "--name", f"bench-{runtime}", "--runtime", runtime,
                           "--simulate-gpus", "4xH100-SXM-80GB", "--state-dir", state,
                           "--interval-ms", "200", "--image-store-gib", "4", "--insecure-registry", registry,
                           "--default-image", image, "--disk-reserve-gib", "1", "--grace-seconds", "1",
                           "--public-host", "127.0.0.1"],
                          env=dict(os.environ, GANTRY_JOIN_TOKEN=join))
        node = None
        for _ in range(400):
            nodes = [n for n in call("GET", "/admin/nodes", token=op)["items"]
                     if n["name"] == f"bench-{runtime}" and n["state"] == "ready"]
            if nodes:
                node = nodes[0]
                break
            time.sleep(0.05)
        assert node, f"the {runtime} agent never became ready"
        volume = shared_volume = None
        if runtime == "sandbox":
            volume = call("POST", f"/orgs/{org}/volumes",
                          {"name": "bench", "region": "lab", "size_gib": 4}, token)["id"]
            shared_volume = call("POST", f"/orgs/{org}/volumes",
                                 {"name": "team", "region": "lab", "kind": "shared", "size_gib": 4}, token)["id"]
        took = []
        for round_ in range(ROUNDS + 1):
            began = time.monotonic()
            body = {"instance_type": "h100x1", "image": image}
            if volume and round_ == ROUNDS:
                body["volumes"] = [{"volume_id": volume, "mount_path": "/vol"},
                                   {"volume_id": shared_volume, "mount_path": "/shared"}]
            order = call("POST", f"/orgs/{org}/orders", body, token)
            port = None
            while port is None:
                view = call("GET", f"/orgs/{org}/orders/{order['id']}", token=token)
                assert view["status"] not in ("failed", "cancelled"), view
                hosts = (view.get("access") or {}).get("hosts") or []
                if hosts and hosts[0].get("ssh"):
                    port = hosts[0]["ssh"]["port"]
                else:
                    time.sleep(0.005)
            while ssh(key, port, "true").returncode != 0:
                time.sleep(0.01)
            took.append((time.monotonic() - began) * 1000)
            if round_ == ROUNDS:
                inside = dd(lambda c: ssh(key, port, f"cd /root && {c}").stdout)
                on_node = lambda c: subprocess.run(c, shell=True, cwd=state, capture_output=True,
                                                   text=True).stdout
                outside = dd(on_node)
                if volume:
                    volume_rates = (dd_both(lambda c: ssh(key, port, f"cd /vol && {c}").stdout),
                                    dd_both(on_node))
                    on_mount = lambda c: subprocess.run(c, shell=True, cwd=shared, capture_output=True,
                                                        text=True).stdout
                    shared_rates = (dd_both(lambda c: ssh(key, port, f"cd /shared && {c}").stdout),
                                    dd_both(on_mount))
            call("POST", f"/orgs/{org}/orders/{order['id']}/cancel", {}, token)
            while call("GET", f"/orgs/{org}/orders/{order['id']}", token=token).get("ended_at") is None:
                time.sleep(0.01)
            time.sleep(0.5)
        rows.append((runtime, took[0], took[1:], inside, outside))
        agent.terminate()
        agent.wait()

    store = os.path.join(work, "podman")
    first = podman_run(store, image, pull=True)
    cached = [podman_run(store, image, pull=False) for _ in range(ROUNDS)]
    shutil.rmtree(store, ignore_errors=True)
    print(f"{'':34}{'first pulled':>16}{'cached':>32}")
    print(f"{'plain podman run --rm (runc) true':34}{first:>13.0f} ms{summary(cached):>32}")
    for runtime, cold, warm, _, _ in rows:
        ratio = statistics.median(warm) / statistics.median(cached)
        print(f"{'Gantry ' + runtime + ': order to SSH':34}{cold:>13.0f} ms{summary(warm):>32}"
              f"   ({cold / first:.1f}x, {ratio:.1f}x podman)")
    for runtime, _, _, inside, outside in rows:
        print(f"dd 1 GiB fdatasync, {runtime}: inside the instance {inside}, the node's disk {outside}")
    (volume_write, volume_read), (node_write, node_read) = volume_rates
    print(f"local volume inside a sandbox instance: write {volume_write}, read {volume_read}; "
          f"the node's disk: write {node_write}, read {node_read}")
    (volume_write, volume_read), (mount_write, mount_read) = shared_rates
    print(f"shared volume (GlusterFS) inside a sandbox instance: write {volume_write}, read {volume_read}; "
          f"the same GlusterFS mount directly: write {mount_write}, read {mount_read}")
finally:
    lab.stop()
    # The agents' image stores and volumes are file systems of their own.
    for runtime in ["sandbox", "oci"]:
        subprocess.run(["umount", "-l", os.path.join(work, f"agent-{runtime}", "images")],
                       check=False, capture_output=True)
        volumes = os.path.join(work, f"agent-{runtime}", "volumes")
        for name in os.listdir(volumes) if os.path.isdir(volumes) else []:
            subprocess.run(["umount", "-l", os.path.join(volumes, name, "data")],
                           check=False, capture_output=True)
    subprocess.run(["umount", "-l", os.path.join(work, "shared")], check=False, capture_output=True)
    shutil.rmtree(work, ignore_errors=True)
    if "corner" in globals():
        shutil.rmtree(corner, ignore_errors=True)
