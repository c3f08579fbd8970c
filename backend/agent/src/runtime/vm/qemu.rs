//! The QEMU command line of one instance's VM. Kept apart from the files
//! and processes it names so that the exact line, passthrough included, is
//! tested on machines that have no GPU to pass through.

use std::ffi::OsString;
use std::path::PathBuf;

/// A port the VM is reached on: `outer` (the node port, inside the VM's
/// network namespace) forwarded to `guest` inside the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forward {
    pub outer: u16,
    pub guest: u16,
}

/// What one VM is.
#[derive(Debug, Clone)]
pub struct Machine {
    pub name: String,
    /// `-accel`: `kvm`, or `tcg,…` (emulation).
    pub accel: &'static str,
    /// QEMU's `-cpu` model: `host` on real servers.
    pub cpu: String,
    pub vcpus: u32,
    pub memory_mib: u64,
    /// The instance's disk, a qcow2 overlay over its image.
    pub disk: PathBuf,
    /// cloud-init's NoCloud seed (an ISO 9660 volume labelled `cidata`).
    pub seed: PathBuf,
    /// The QMP socket the agent drives it through.
    pub qmp: PathBuf,
    pub forwards: Vec<Forward>,
    /// PCI addresses passed through by VFIO (its GPUs, with the other
    /// functions of their slots).
    pub passthrough: Vec<String>,
}

impl Machine {
    /// The arguments after `qemu-system-x86_64`.
    pub fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |a: &str, b: String| {
            args.push(a.into());
            args.push(b.into());
        };
        push("-name", format!("{},debug-threads=on", self.name));
        // No graphics: SeaBIOS writes to the serial port too, so "no
        // bootable device" reaches the log.
        push("-machine", "q35,graphics=off".into());
        push("-accel", self.accel.into());
        push("-cpu", self.cpu.clone());
        push("-smp", self.vcpus.to_string());
        push("-m", format!("{}M", self.memory_mib));
        push("-display", "none".into());
        push("-vga", "none".into());
        // The serial console is the order's log: QEMU's standard output.
        push("-chardev", "stdio,id=console,signal=off".into());
        push("-serial", "chardev:console".into());
        push(
            "-qmp",
            format!("unix:{},server=on,wait=off", self.qmp.display()),
        );
        push(
            "-drive",
            format!(
                "file={},if=virtio,format=qcow2,discard=unmap",
                self.disk.display()
            ),
        );
        push(
            "-drive",
            format!(
                "file={},if=virtio,format=raw,readonly=on",
                self.seed.display()
            ),
        );
        let forwards: String = self
            .forwards
            .iter()
            .map(|f| format!(",hostfwd=tcp::{}-:{}", f.outer, f.guest))
            .collect();
        push("-netdev", format!("user,id=net0{forwards}"));
        push("-device", "virtio-net-pci,netdev=net0".into());
        push("-device", "virtio-rng-pci".into());
        for address in &self.passthrough {
            push("-device", format!("vfio-pci,host={address}"));
        }
        // A QEMU that a guest breaks out of may spawn nothing, raise no
        // privilege and use no obsolete system call.
        push(
            "-sandbox",
            "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny".into(),
        );
        args.push("-nodefaults".into());
        args.push("-no-user-config".into());
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(args: &[OsString]) -> String {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn a_gpu_instance_gets_its_size_its_disk_its_ports_and_its_gpus() {
        let machine = Machine {
            name: "gantry-0190".into(),
            accel: "kvm",
            cpu: "host".into(),
            vcpus: 26,
            memory_mib: 229_376,
            disk: "/vm/disk.qcow2".into(),
            seed: "/vm/seed.iso".into(),
            qmp: "/vm/qmp.sock".into(),
            forwards: vec![
                Forward {
                    outer: 42001,
                    guest: 22,
                },
                Forward {
                    outer: 42002,
                    guest: 8888,
                },
            ],
            passthrough: vec!["0000:18:00.0".into(), "0000:2a:00.0".into()],
        };
        assert_eq!(
            text(&machine.args()),
            "-name gantry-0190,debug-threads=on -machine q35,graphics=off -accel kvm -cpu host -smp 26 \
             -m 229376M -display none -vga none \
             -chardev stdio,id=console,signal=off -serial chardev:console \
             -qmp unix:/vm/qmp.sock,server=on,wait=off \
             -drive file=/vm/disk.qcow2,if=virtio,format=qcow2,discard=unmap \
             -drive file=/vm/seed.iso,if=virtio,format=raw,readonly=on \
             -netdev user,id=net0,hostfwd=tcp::42001-:22,hostfwd=tcp::42002-:8888 \
             -device virtio-net-pci,netdev=net0 -device virtio-rng-pci \
             -device vfio-pci,host=0000:18:00.0 -device vfio-pci,host=0000:2a:00.0 \
             -sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny \
             -nodefaults -no-user-config"
        );
    }
}
