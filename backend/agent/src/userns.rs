//! A user namespace per workload: uid and gid 0 inside are the first ids of
//! a range of the node's own, so the workload is root over its files and
//! nothing else; a file of the node's root stays out of its reach. No
//! further user namespace can be made inside (most kernel escapes start
//! with one). The namespace is pinned by a bind mount of its file, so the
//! runtime, the SSH server and a restarted agent all find it again.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::mounts;

/// How many ids each workload's namespace maps: every id a distribution's
/// packages use, `nobody` (65534) included.
pub const IDS_PER_WORKLOAD: u32 = 65_536;

/// Makes the namespace mapping 0–65535 to `first`… and pins it at `pin`.
pub fn create(first: u32, pin: &Path) -> Result<(), String> {
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
    let limit = CString::new("/proc/sys/user/max_user_namespaces").map_err(|e| fail("", &e))?;
    let sleep = crate::runtime::find_program("sleep").ok_or("no `sleep` on this node")?;
    let mut command = Command::new(sleep);
    command
        .arg("60")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: between fork and exec only raw system calls on memory made
    // before the fork. The new namespace's creator holds every capability
    // in it, enough to set its limit of nested namespaces to none.
    unsafe {
        command.pre_exec(move || {
            if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd = libc::open(limit.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let written = libc::write(fd, b"0".as_ptr().cast(), 1);
            libc::close(fd);
            if written != 1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // `spawn` returns once the child has run its pre-exec steps and exec'd.
    let mut helper = command
        .spawn()
        .map_err(|e| fail("making the workload's user namespace", &e))?;
    let pid = helper.id();
    let mapped = (|| -> std::io::Result<()> {
        let map = format!("0 {first} {IDS_PER_WORKLOAD}\n");
        std::fs::write(format!("/proc/{pid}/uid_map"), &map)?;
        std::fs::write(format!("/proc/{pid}/gid_map"), &map)?;
        if let Some(dir) = pin.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(pin, "")?;
        mounts::bind(Path::new(&format!("/proc/{pid}/ns/user")), pin)
    })();
    helper.kill().ok();
    helper.wait().ok();
    mapped.map_err(|e| fail("mapping the workload's user namespace", &e))
}

/// The pinned namespace, to join or to hand to the kernel.
pub fn open(pin: &Path) -> std::io::Result<OwnedFd> {
    Ok(std::fs::File::open(pin)?.into())
}

/// Unpins the namespace; it ends with the last process and mount in it.
pub fn release(pin: &Path) {
    if pin.exists() {
        mounts::unmount(pin).ok();
        std::fs::remove_file(pin).ok();
    }
}

/// Joins the namespaces `fds` (each with its `CLONE_NEW…` type), in
/// order, and becomes root of the user namespace when one of them is one.
/// For a just-forked child: raw system calls only, no allocation.
pub fn enter(fds: &[(std::os::fd::RawFd, libc::c_int)]) -> std::io::Result<()> {
    let mut user = false;
    for (fd, kind) in fds {
        // SAFETY: setns(2) takes a descriptor and a flag.
        if unsafe { libc::setns(*fd, *kind) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        user |= *kind == libc::CLONE_NEWUSER;
    }
    if user {
        // SAFETY: plain system calls on integers.
        let failed = unsafe {
            libc::setgroups(0, std::ptr::null()) != 0
                || libc::setresgid(0, 0, 0) != 0
                || libc::setresuid(0, 0, 0) != 0
        };
        if failed {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
