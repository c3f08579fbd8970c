#!/usr/bin/env bash
# A real GlusterFS volume for the shared-volume tests, made once per
# machine: Debian's glusterd, one volume with one brick on this host, and
# the volume mounted with the FUSE client. Prints the mount point.
#
# Kept under $GANTRY_TEST_CACHE (default /var/cache/gantry-test)/glusterfs;
# a later run finds glusterd, the volume and the mount and changes nothing.
set -euo pipefail

cache=${GANTRY_TEST_CACHE:-/var/cache/gantry-test}
dir="$cache/glusterfs"
volume=gantry-test
mnt="$dir/mnt"
mkdir -p "$cache"
# The daemons started below must not inherit the lock (9>&-).
exec 9>"$dir.lock"
flock 9

mounted() { grep -q " $mnt fuse.glusterfs " /proc/mounts && stat -f "$mnt" >/dev/null 2>&1; }
if mounted; then
  echo "$mnt"
  exit 0
fi
# A mount whose client died answers "Transport endpoint is not connected"
# to everything, mkdir included: it goes first.
if grep -q " $mnt " /proc/mounts; then
  umount -l "$mnt"
fi
mkdir -p "$dir/brick" "$mnt"

# glusterd answers on its socket once it is up.
if ! gluster --mode=script pool list >/dev/null 2>&1; then
  glusterd --log-file="$dir/glusterd.log" </dev/null >/dev/null 2>&1 9>&-
  for _ in $(seq 1 100); do
    gluster --mode=script pool list >/dev/null 2>&1 && break
    sleep 0.1
  done
fi
# GlusterFS refuses a brick on a loopback address; the host's name is one
# of its own addresses all the same.
# A volume kept from a machine of another name has a brick nobody serves.
if gluster --mode=script volume info "$volume" >/dev/null 2>&1 &&
  ! gluster --mode=script volume info "$volume" | grep -q "^Brick1: $(hostname):"; then
  gluster --mode=script volume stop "$volume" force >/dev/null 2>&1 || true
  gluster --mode=script volume delete "$volume" >/dev/null
  rm -rf "$dir/brick"
  mkdir -p "$dir/brick"
fi
if ! gluster --mode=script volume info "$volume" >/dev/null 2>&1; then
  gluster --mode=script volume create "$volume" "$(hostname):$dir/brick" force >/dev/null
fi
# A started volume whose brick process died is started again (force
# starts only what is not running); glusterd may not have seen the brick
# die yet, so the start is repeated until the brick serves.
for i in $(seq 0 99); do
  gluster --mode=script volume status "$volume" --xml 2>/dev/null | grep -q "<status>1</status>" && break
  if [ $((i % 10)) = 0 ]; then
    gluster --mode=script volume start "$volume" force </dev/null >/dev/null 2>&1 9>&- || true
  fi
  sleep 0.2
done
# A brick just started may not serve yet: the mount then answers nothing
# and is tried again.
for _ in $(seq 1 50); do
  mount -t glusterfs "$(hostname):/$volume" "$mnt" </dev/null >/dev/null 2>&1 9>&- || true
  mounted && break
  grep -q " $mnt " /proc/mounts && umount -l "$mnt"
  sleep 0.2
done
mounted || { echo "the GlusterFS volume did not mount at $mnt" >&2; exit 1; }
echo "$mnt"
