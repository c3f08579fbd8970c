#!/usr/bin/env bash
# What the agent's container tests need on this machine, made once:
#
# - lxcfs mounted at /var/lib/lxcfs (started here when it is not), so that
#   workloads' /proc says their instance type's size;
# - the test images, built from a Debian root file system (debootstrap from
#   Debian's archive, then `podman import` and `podman build`; nothing is
#   pulled from a registry), pushed into a registry's storage that the tests
#   serve with Debian's docker-registry on ports of their own.
#
# The images are kept under $GANTRY_TEST_CACHE (default
# /var/cache/gantry-test) in a directory named by this script's hash, so a
# changed script builds them again and an unchanged one finds them. Prints
# that directory; its images.json names the images.
set -euo pipefail

cache=${GANTRY_TEST_CACHE:-/var/cache/gantry-test}
mkdir -p "$cache"

# A mount whose lxcfs has died (a package's start script run where no init
# keeps it, a killed earlier run) answers "Transport endpoint is not
# connected"; it is let go and lxcfs started anew.
lxcfs_answers() { head -c1 /var/lib/lxcfs/proc/meminfo >/dev/null 2>&1; }
if ! lxcfs_answers; then
  (
    exec 9>"$cache/lxcfs.lock"
    flock 9
    if ! lxcfs_answers; then
      if grep -q ' /var/lib/lxcfs ' /proc/mounts; then
        fusermount -u -z /var/lib/lxcfs 2>/dev/null || umount -l /var/lib/lxcfs
      fi
      mkdir -p /var/lib/lxcfs
      setsid lxcfs /var/lib/lxcfs >"$cache/lxcfs.log" 2>&1 < /dev/null &
      for _ in $(seq 1 50); do
        lxcfs_answers && break
        sleep 0.1
      done
    fi
  )
  lxcfs_answers || { echo "lxcfs did not start: $(cat "$cache/lxcfs.log")" >&2; exit 1; }
fi

key=$(sha256sum "$0" | cut -c1-16)
dir="$cache/images-$key"
exec 8>"$cache/images.lock"
flock 8
if [ -f "$dir/images.json" ]; then
  echo "$dir"
  exit 0
fi
rm -rf "$dir"
mkdir -p "$dir"
work=$(mktemp -d "$cache/build.XXXXXX")
registry_pid=
cleanup() {
  [ -n "$registry_pid" ] && kill "$registry_pid" 2>/dev/null
  podman --root "$work/storage" --runroot "$work/run" image rm --all --force >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
podman=(podman --root "$work/storage" --runroot "$work/run" --storage-driver overlay
  --cgroup-manager cgroupfs --events-backend file)

echo "building the test images in $dir (once per machine)" >&2
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
  bookworm "$work/rootfs" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 ||
  { tail -20 "$work/debootstrap.log" >&2; exit 1; }
# The machine's own certificate authorities, so that HTTPS from inside an
# instance works where this network's proxy signs connections.
cp /etc/ssl/certs/ca-certificates.crt "$work/rootfs/etc/ssl/certs/ca-certificates.crt"
rm -f "$work/rootfs/etc/resolv.conf" "$work/rootfs/etc/hostname"
tar -C "$work/rootfs" -c . |
  "${podman[@]}" import --change 'CMD ["bash"]' - gantry-test/debian:bookworm >/dev/null

build() {
  local name=$1
  shift
  mkdir -p "$work/$name"
  printf '%s\n' "FROM gantry-test/debian:bookworm" "$@" >"$work/$name/Containerfile"
  "${podman[@]}" build --runtime runc --network none --ulimit nofile=1024:1024 \
    --ulimit nproc=4096:4096 -q -t "gantry-test/$name:1" "$work/$name" >/dev/null
}
# A set-user-id root program: it must give no one more than they are.
build setuid 'RUN cp /usr/bin/id /usr/local/bin/suid-id && chmod 4755 /usr/local/bin/suid-id'
# An entrypoint that ends at once, whatever it is asked to run.
build exits 'ENTRYPOINT ["/bin/false"]'
# A layer of 1.5 GiB of zeros: a few megabytes in the registry, more than
# a 1 GiB disk unpacked.
build huge 'RUN head -c 1536M /dev/zero > /huge'

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$work/registry.yml" <<EOF
version: 0.1
storage:
  filesystem:
    rootdirectory: $dir/registry
http:
  addr: 127.0.0.1:$port
EOF
docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
registry_pid=$!
for _ in $(seq 1 50); do
  curl -fs "http://127.0.0.1:$port/v2/" >/dev/null && break
  sleep 0.1
done
for image in debian:bookworm setuid:1 exits:1 huge:1; do
  "${podman[@]}" push --quiet --tls-verify=false "gantry-test/$image" \
    "127.0.0.1:$port/gantry-test/$image" >/dev/null
done
cat >"$dir/images.json" <<EOF
{
  "registry_storage": "$dir/registry",
  "base": "gantry-test/debian:bookworm",
  "setuid": "gantry-test/setuid:1",
  "exits": "gantry-test/exits:1",
  "huge": "gantry-test/huge:1"
}
EOF
echo "$dir"
