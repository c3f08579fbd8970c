"""What the instance benchmarks share: a `gantry serve` on SQLite with an
operator and the lab's catalog (region `lab`, the H100 model), the test
images of scripts/test-fixtures.sh served by Debian's docker-registry,
processes that end with the run, and SSH into instances."""

import json
import os
import socket
import subprocess
import time
import urllib.request

SCRIPTS = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ssh(key, port, command):
    return subprocess.run(
        ["ssh", "-i", key, "-p", str(port), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=2",
         "root@127.0.0.1", command], capture_output=True, text=True)


class Lab:
    """A server in `work` (binaries from `bin_dir`) and the processes of
    one run."""

    def __init__(self, bin_dir, work):
        self.bin = bin_dir
        self.work = work
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}/api/v1"
        self.processes = []

    def call(self, method, path, body=None, token=None):
        request = urllib.request.Request(self.base + path, method=method,
                                         data=json.dumps(body).encode() if body is not None else None,
                                         headers={"content-type": "application/json"})
        if token:
            request.add_header("authorization", f"Bearer {token}")
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.load(reply)

    def start(self, args, log=None, **kwargs):
        """Starts a process that ends with the run; its stderr goes to `log`
        in the work directory when named."""
        err = open(os.path.join(self.work, log), "w") if log else subprocess.DEVNULL
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, **kwargs)
        self.processes.append(process)
        return process

    def registry(self):
        """Serves the test images; answers the registry's address and the
        fixture's image names."""
        fixtures = subprocess.run([os.path.join(SCRIPTS, "test-fixtures.sh")], check=True,
                                  capture_output=True, text=True).stdout.strip()
        images = json.load(open(os.path.join(fixtures, "images.json")))
        registry = f"127.0.0.1:{free_port()}"
        config = os.path.join(self.work, "registry.yml")
        with open(config, "w") as f:
            f.write(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {images['registry_storage']}\n"
                    f"  maintenance:\n    readonly:\n      enabled: true\nhttp:\n  addr: {registry}\n")
        self.start(["docker-registry", "serve", config])
        return registry, images

    def serve(self, password):
        """Starts the server, makes its operator and the lab's region and GPU
        model; answers the operator's token."""
        env = dict(os.environ, GANTRY_DATA_DIR=os.path.join(self.work, "server"),
                   GANTRY_LISTEN=f"127.0.0.1:{self.port}", GANTRY_DEMO="false",
                   GANTRY_RATE_LIMIT_PER_SECOND="100000", GANTRY_RATE_LIMIT_BURST="100000",
                   GANTRY_SCHEDULER_INTERVAL_MS="100")
        env.pop("DATABASE_URL", None)
        self.start([f"{self.bin}/gantry", "serve"], env=env)
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        operator = {"email": "op@example.com", "password": password}
        self.call("POST", "/auth/signup", dict(operator, name="Op", organization="Op"))
        subprocess.run([f"{self.bin}/gantry", "admin", "create-operator", "--email", operator["email"],
                        "--password", password], env=env, check=True, stdout=subprocess.DEVNULL)
        op = self.call("POST", "/auth/login", operator)["access_token"]
        self.call("POST", "/admin/catalog/regions", {"name": "lab", "display_name": "Lab", "time_zone": "UTC"},
                  op)
        self.call("POST", "/admin/catalog/gpu-models",
                  {"name": "H100-SXM-80GB", "vendor": "NVIDIA", "memory_gib": 80, "interconnect": "nvlink"}, op)
        return op

    def instance_type(self, op, name, vcpus, memory_gib, disk_gib):
        kind = self.call("POST", "/admin/catalog/instance-types",
                         {"name": name, "gpu_model": "H100-SXM-80GB", "gpus_per_node": 1, "vcpus": vcpus,
                          "memory_gib": memory_gib, "disk_gib": disk_gib}, op)
        self.call("POST", f"/admin/catalog/instance-types/{kind['id']}/prices",
                  {"pricing_class": "on_demand", "hourly_micros": 2_000_000}, op)

    def tenant(self, password):
        """A tenant with an SSH key; answers its token, organization id and
        private key's path."""
        tenant = {"email": "t@example.com", "password": password}
        signed = self.call("POST", "/auth/signup", dict(tenant, name="T", organization="T"))
        key = os.path.join(self.work, "key")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
        self.call("POST", "/me/ssh-keys", {"name": "bench", "public_key": open(key + ".pub").read()},
                  signed["access_token"])
        return signed["access_token"], signed["organization"]["id"], key

    def stop(self):
        for process in reversed(self.processes):
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
