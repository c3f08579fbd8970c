#!/usr/bin/env python3
"""A VM instance from its order to SSH answering, beside a plain
`qemu-system-x86_64` boot of the same image with the same machine in the
same run (what Gantry adds: its checks, the disk overlay, the seed, the
fences, the network), and beside `sandbox` and `oci` instances of the same
run; then a CPU benchmark and a disk write inside the VM beside the node.

    cargo build --release && scripts/bench-vms.py

A `gantry serve` on SQLite and one real `gantry-agent` per runtime (four
simulated H100s). The VM image is scripts/test-vm-image.sh's (Debian 12,
cloud kernel, cloud-init), the container image scripts/test-fixtures.sh's,
served by Debian's docker-registry. Each round orders one instance of 1
vCPU, 1 GiB and a 4 GiB disk per runtime and times it from the order's
POST until `ssh root@… true` succeeds, then cancels it; the plain boot is
timed from QEMU's start until the same. The first container instance of
each runtime pulls its image (left out of the figures). Then, in the last
VM: `sysbench cpu --threads=1 --time=10` and `dd` of 1 GiB with fdatasync,
beside the same on the node.

QEMU uses KVM where the machine's KVM boots a stock kernel, QEMU's
emulation (TCG) otherwise (a paravirtual `kvm_pvm` boots only its own
guest kernels); the report says which.
Needs root, qemu-system-x86, qemu-utils, genisoimage, bubblewrap, podman,
runc, slirp4netns, docker-registry, ssh and sysbench.
GANTRY_BIN_DIR (default target/release) and ROUNDS (default 3) apply.
"""

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from bench_lab import Lab, free_port, ssh

BIN = os.environ.get("GANTRY_BIN_DIR", "target/release")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
PASSWORD = "vm bench correct horse"
SCRIPTS = os.path.dirname(os.path.abspath(__file__))
KVM = os.path.exists("/dev/kvm") and not os.path.exists("/sys/module/kvm_pvm")
ACCEL, CPU = ("kvm", "host") if KVM else ("tcg,tb-size=128", "max")
work = tempfile.mkdtemp(prefix="gantry-bench-vms-")
os.chmod(work, 0o711)
lab = Lab(BIN, work)
call = lab.call


def until_ssh(key, port, limit=900):
    deadline = time.monotonic() + limit
    while ssh(key, port, "true").returncode != 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no SSH on port {port}")
        time.sleep(0.2)


def seconds(values):
    return f"p50 {statistics.median(values):.1f} s (of {len(values)}: " + \
        ", ".join(f"{v:.1f}" for v in values) + ")"


def plain_boot(image, key):
    """The same image and machine, QEMU started by hand: no checks, no
    fences, no private network."""
    run = tempfile.mkdtemp(dir=work)
    disk = os.path.join(run, "disk.qcow2")
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", image, disk, str(4 << 30)],
                   check=True)
    with open(os.path.join(run, "meta-data"), "w") as f:
        f.write(f"instance-id: {os.path.basename(run)}\nlocal-hostname: plain\n")
    with open(os.path.join(run, "user-data"), "w") as f:
        f.write("#cloud-config\nusers: []\ndisable_root: false\nssh_authorized_keys:\n"
                f"  - {json.dumps(open(key + '.pub').read().strip())}\n")
    subprocess.run(["genisoimage", "-quiet", "-volid", "cidata", "-joliet", "-rock", "-output",
                    os.path.join(run, "seed.iso"), os.path.join(run, "meta-data"),
                    os.path.join(run, "user-data")], check=True)
    port = free_port()
    began = time.monotonic()
    qemu = subprocess.Popen(
        ["qemu-system-x86_64", "-machine", "q35,graphics=off", "-accel", ACCEL, "-cpu", CPU, "-smp", "1",
         "-m", "1024M", "-display", "none", "-vga", "none", "-serial", "null",
         "-drive", f"file={disk},if=virtio,format=qcow2,discard=unmap",
         "-drive", f"file={run}/seed.iso,if=virtio,format=raw,readonly=on",
         "-netdev", f"user,id=net0,hostfwd=tcp:127.0.0.1:{port}-:22", "-device", "virtio-net-pci,netdev=net0",
         "-device", "virtio-rng-pci", "-nodefaults"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        until_ssh(key, port)
        return time.monotonic() - began
    finally:
        qemu.kill()
        qemu.wait()
        shutil.rmtree(run, ignore_errors=True)


def sysbench(text):
    return float([l for l in text.splitlines() if "events per second" in l][-1].split(":")[-1])


def dd_rate(text):
    return [l for l in text.splitlines() if "copied" in l][-1].split(",")[-1].strip()


DD = "dd if=/dev/zero of=/root/bench.dd bs=1M count=1024 conv=fdatasync 2>&1; rm -f /root/bench.dd"
SYSBENCH = "sysbench cpu --threads=1 --time=10 run"

try:
    vm_images = subprocess.run([os.path.join(SCRIPTS, "test-vm-image.sh")], check=True, capture_output=True,
                               text=True).stdout.strip()
    vm_image = os.path.join(vm_images, "debian-12.qcow2")
    registry, images = lab.registry()
    oci_image = f"{registry}/{images['base']}"
    op = lab.serve(PASSWORD)
    lab.instance_type(op, "x1", 1, 1, 4)
    call("PUT", "/admin/catalog/image-policy", {"allowed_prefixes": [registry]}, op)
    call("POST", "/admin/catalog/images", {"name": "debian-12", "reference": "vm-images/debian-12"}, op)
    token, org, key = lab.tenant(PASSWORD)

    uids = {"sandbox": "300000000-300655359", "oci": "301000000-301655359", "vm": "302000000-302655359"}
    ports = {"sandbox": "43000-43099", "oci": "43100-43199", "vm": "43200-43299"}
    for runtime in ["sandbox", "oci", "vm"]:
        join = call("POST", "/admin/join-tokens", {"region": "lab"}, op)["token"]
        args = [f"{BIN}/gantry-agent", "--server", f"http://127.0.0.1:{lab.port}", "--name", f"bench-{runtime}",
                "--runtime", runtime, "--simulate-gpus", "4xH100-SXM-80GB",
                "--state-dir", os.path.join(work, f"agent-{runtime}"), "--interval-ms", "200",
                "--uid-range", uids[runtime], "--port-range", ports[runtime],
                "--disk-reserve-gib", "1", "--grace-seconds", "60", "--public-host", "127.0.0.1"]
        if runtime == "vm":
            args += ["--vm-image-dir", vm_images, "--vm-accel", ACCEL.split(",")[0], "--vm-cpu", CPU,
                     "--vm-boot-seconds", "900"]
        else:
            args += ["--image-store-gib", "4", "--insecure-registry", registry, "--default-image", oci_image]
        lab.start(args, log=f"agent-{runtime}.log", env=dict(os.environ, GANTRY_JOIN_TOKEN=join))
    for _ in range(1200):
        ready = [n for n in call("GET", "/admin/nodes", token=op)["items"] if n["state"] == "ready"]
        if len(ready) == 3:
            break
        time.sleep(0.05)
    nodes = {n["runtime"]: n["name"] for n in call("GET", "/admin/nodes", token=op)["items"]}
    if len(nodes) != 3:
        for runtime in ["sandbox", "oci", "vm"]:
            print(runtime, open(os.path.join(work, f"agent-{runtime}.log")).read()[:1500])
        raise RuntimeError(f"agents not ready: {nodes}")
    for runtime, name in nodes.items():
        node_id = [n for n in call("GET", "/admin/nodes", token=op)["items"] if n["name"] == name][0]["id"]
        call("POST", f"/admin/nodes/{node_id}/cordon", {}, op)

    def instance(runtime, keep=False):
        """Orders an instance on the `runtime` node alone; answers the time to
        SSH and its port (cancelled unless kept)."""
        name = nodes[runtime]
        node_id = [n for n in call("GET", "/admin/nodes", token=op)["items"] if n["name"] == name][0]["id"]
        call("POST", f"/admin/nodes/{node_id}/uncordon", {}, op)
        body = {"instance_type": "x1", "image": "debian-12" if runtime == "vm" else oci_image}
        began = time.monotonic()
        order = call("POST", f"/orgs/{org}/orders", body, token)["id"]
        port = None
        while port is None:
            view = call("GET", f"/orgs/{org}/orders/{order}", token=token)
            if view["status"] == "failed":
                raise RuntimeError(f"{runtime}: {view['failure_reason']}")
            hosts = (view.get("access") or {}).get("hosts") or []
            port = hosts[0]["ssh"]["port"] if hosts and hosts[0].get("ssh") else None
            time.sleep(0.05)
        until_ssh(key, port)
        took = time.monotonic() - began
        call("POST", f"/admin/nodes/{node_id}/cordon", {}, op)
        if not keep:
            call("POST", f"/orgs/{org}/orders/{order}/cancel", {}, token)
            while not call("GET", f"/orgs/{org}/orders/{order}", token=token).get("ended_at"):
                time.sleep(0.2)
        return took, port

    for runtime in ["sandbox", "oci"]:
        instance(runtime)  # the first pulls the image
    times = {"vm": [], "plain": [], "sandbox": [], "oci": []}
    for round_ in range(ROUNDS):
        for runtime in ["sandbox", "oci"]:
            times[runtime].append(instance(runtime)[0])
        times["plain"].append(plain_boot(vm_image, key))
        took, port = instance("vm", keep=round_ == ROUNDS - 1)
        times["vm"].append(took)
        print(f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items()), flush=True)

    inside_cpu = sysbench(ssh(key, port, SYSBENCH).stdout)
    node_cpu = sysbench(subprocess.run(SYSBENCH.split(), capture_output=True, text=True).stdout)
    inside_dd = dd_rate(ssh(key, port, DD).stdout)
    node_dd = dd_rate(subprocess.run(["sh", "-c", DD.replace("/root/", work + "/")], capture_output=True,
                                     text=True).stdout)
    print(f"\naccelerator: {ACCEL.split(',')[0]} (cpu {CPU}); {ROUNDS} rounds, "
          f"1 vCPU, 1 GiB, a 4 GiB disk; debian-12 image {os.path.getsize(vm_image) >> 20} MiB")
    print(f"order to SSH, vm:           {seconds(times['vm'])}")
    print(f"plain qemu boot to SSH:     {seconds(times['plain'])}")
    print(f"  vm / plain (medians):     {statistics.median(times['vm']) / statistics.median(times['plain']):.2f}")
    print(f"order to SSH, sandbox:      {seconds(times['sandbox'])}")
    print(f"order to SSH, oci:          {seconds(times['oci'])}")
    print(f"sysbench cpu, 1 thread:     vm {inside_cpu:.1f} events/s, node {node_cpu:.1f} "
          f"({inside_cpu / node_cpu:.2f} of the node)")
    print(f"dd 1 GiB, fdatasync:        vm {inside_dd}, node {node_dd}")
finally:
    lab.stop()
    subprocess.run(["pkill", "-9", "-f", "qemu-system-x86_64 -name gantry"], check=False)
    subprocess.run(["pkill", "-9", "-x", "slirp4netns"], check=False)
    subprocess.run(f"grep ' {work}' /proc/mounts | cut -d' ' -f2 | sort -r | xargs -r -n1 umount -l",
                   shell=True, check=False)
    shutil.rmtree(work, ignore_errors=True)
