#!/usr/bin/env bash
# The VM image the `vm` runtime's tests boot, made once per machine: a
# Debian 12 disk built from Debian's archive (debootstrap, the cloud
# kernel, cloud-init with its NoCloud source, an SSH server, extlinux as
# the boot loader), as a qcow2 file that instances' disks are overlays of.
# It is what an operator builds for the catalog; docs/vms.md says how.
#
# Kept under $GANTRY_TEST_CACHE (default /var/cache/gantry-test) in a
# directory named by this script's hash. Prints that directory; its
# image.json names the disk and its digest.
set -euo pipefail

cache=${GANTRY_TEST_CACHE:-/var/cache/gantry-test}
mkdir -p "$cache"
key=$(sha256sum "$0" | cut -c1-16)
dir="$cache/vm-image-$key"
exec 8>"$cache/vm-image.lock"
flock 8
if [ -f "$dir/image.json" ]; then
  echo "$dir"
  exit 0
fi
rm -rf "$dir"
mkdir -p "$dir"
work=$(mktemp -d "$cache/vm-build.XXXXXX")
loop=
cleanup() {
  mountpoint -q "$work/root" && umount -R "$work/root"
  [ -n "$loop" ] && losetup -d "$loop"
  rm -rf "$work"
}
trap cleanup EXIT

echo "building the test VM image in $dir (once per machine)" >&2
# One partition from 1 MiB, so the guest's growpart can stretch it over
# the instance's disk; its file system is reached through an offset loop
# device, which needs no partition device nodes.
truncate -s 2G "$work/disk.raw"
printf 'label: dos\nstart=2048, type=83, bootable\n' | sfdisk -q "$work/disk.raw"
loop=$(losetup -f --show -o $((2048 * 512)) "$work/disk.raw")
# extlinux reads neither 64-bit block numbers nor metadata checksums.
mkfs.ext4 -q -L root -O ^64bit,^metadata_csum "$loop"
mkdir "$work/root"
mount "$loop" "$work/root"
debootstrap --variant=minbase --include=systemd-sysv \
  bookworm "$work/root" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 ||
  { tail -20 "$work/debootstrap.log" >&2; exit 1; }
# The rest by apt inside the new root, whose package scripts (the kernel's
# initramfs among them) want /proc, /sys and /dev; no service starts.
for fs in proc sys dev; do mount --rbind "/$fs" "$work/root/$fs"; done
printf '#!/bin/sh\nexit 101\n' >"$work/root/usr/sbin/policy-rc.d"
chmod +x "$work/root/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$work/root/etc/resolv.conf"
chroot "$work/root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
  --no-install-recommends linux-image-cloud-amd64 udev dbus openssh-server cloud-init \
  cloud-guest-utils e2fsprogs iproute2 procps ca-certificates sysbench \
  >"$work/apt.log" 2>&1 || { tail -20 "$work/apt.log" >&2; exit 1; }
chroot "$work/root" apt-get clean
rm -f "$work/root/usr/sbin/policy-rc.d" "$work/root/etc/resolv.conf"
for fs in proc sys dev; do umount -R "$work/root/$fs"; done
kernel=$(basename "$(ls "$work"/root/boot/vmlinuz-* | head -1)")
initrd=$(basename "$(ls "$work"/root/boot/initrd.img-* | head -1)")
mkdir -p "$work/root/boot/extlinux"
cat >"$work/root/boot/extlinux/extlinux.conf" <<EOF
DEFAULT debian
TIMEOUT 1
LABEL debian
  LINUX /boot/$kernel
  INITRD /boot/$initrd
  APPEND root=LABEL=root rw console=ttyS0 quiet
EOF
extlinux --install "$work/root/boot/extlinux" 2>/dev/null
dd if=/usr/lib/syslinux/mbr/mbr.bin of="$work/disk.raw" bs=440 count=1 conv=notrunc status=none
echo 'LABEL=root / ext4 defaults 0 1' >"$work/root/etc/fstab"
# Any NIC by DHCP (QEMU's user-mode network answers it).
cat >"$work/root/etc/systemd/network/80-dhcp.network" <<EOF
[Match]
Name=en* eth*
[Network]
DHCP=ipv4
EOF
ln -sf /lib/systemd/system/systemd-networkd.service \
  "$work/root/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
# cloud-init looks only where the node puts its seed, and leaves the
# network to systemd-networkd.
cat >"$work/root/etc/cloud/cloud.cfg.d/90_gantry.cfg" <<EOF
datasource_list: [ NoCloud, None ]
network: {config: disabled}
EOF
rm -f "$work/root/etc/hostname" "$work/root/etc/ssh/ssh_host_"*
: >"$work/root/etc/machine-id"
umount "$work/root"
losetup -d "$loop"
loop=
qemu-img convert -O qcow2 "$work/disk.raw" "$dir/debian-12.qcow2"
digest=$(sha256sum "$dir/debian-12.qcow2" | cut -d' ' -f1)
cat >"$dir/image.json" <<EOF
{
  "disk": "$dir/debian-12.qcow2",
  "digest": "sha256:$digest"
}
EOF
echo "$dir"
