//! The mount calls the agent makes for workloads' roots, as thin wrappers
//! over the system calls: bind mounts, idmapped bind mounts (a directory
//! of the node shown with its owners shifted into a workload's id range),
//! overlays and unmounting.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn c_path(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)
}

fn check(result: libc::c_long) -> std::io::Result<libc::c_long> {
    if result < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

/// Mounts `source` (of `fstype`, with `options`) at `target`.
pub fn mount(
    source: &Path,
    target: &Path,
    fstype: &str,
    flags: libc::c_ulong,
    options: &str,
) -> std::io::Result<()> {
    let (source, target) = (c_path(source)?, c_path(target)?);
    let fstype = CString::new(fstype).map_err(std::io::Error::other)?;
    let options = CString::new(options).map_err(std::io::Error::other)?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let result = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            options.as_ptr().cast(),
        )
    };
    check(result.into()).map(drop)
}

/// A bind mount of `source` at `target`.
pub fn bind(source: &Path, target: &Path) -> std::io::Result<()> {
    mount(source, target, "", libc::MS_BIND, "")
}

/// Shows the directory `source` at `target` (read-only where asked),
/// without devices or set-user-id programs, with every owner shifted as
/// the user namespace `userns` maps it: a file of uid 0 in `source`
/// belongs to the namespace's root at `target`, and what that root writes
/// there is stored as uid 0.
pub fn idmapped(
    source: &Path,
    target: &Path,
    userns: &OwnedFd,
    read_only: bool,
) -> std::io::Result<()> {
    shown(source, target, Some(userns), read_only)
}

/// Shows the directory `source` at `target` as [`idmapped`] does, with
/// owners shifted only where `userns` is given: a file system that takes
/// no idmapped mount (FUSE, NFS) is shown with the ids it stores.
pub fn shown(
    source: &Path,
    target: &Path,
    userns: Option<&OwnedFd>,
    read_only: bool,
) -> std::io::Result<()> {
    let (source, target) = (c_path(source)?, c_path(target)?);
    let flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC;
    // SAFETY: open_tree(2) reads a NUL-terminated path; the descriptor it
    // answers is owned from here on.
    let tree = unsafe {
        let fd = check(libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            source.as_ptr(),
            flags,
        ))?;
        OwnedFd::from_raw_fd(i32::try_from(fd).map_err(std::io::Error::other)?)
    };
    let attr = libc::mount_attr {
        attr_set: if userns.is_some() {
            libc::MOUNT_ATTR_IDMAP
        } else {
            0
        } | if read_only {
            libc::MOUNT_ATTR_RDONLY
        } else {
            0
        } | libc::MOUNT_ATTR_NODEV
            | libc::MOUNT_ATTR_NOSUID,
        attr_clr: 0,
        propagation: 0,
        userns_fd: match userns {
            Some(ns) => u64::try_from(ns.as_raw_fd()).map_err(std::io::Error::other)?,
            None => 0,
        },
    };
    let empty = c"";
    // SAFETY: mount_setattr(2) reads `attr` of the size given; move_mount(2)
    // reads two NUL-terminated paths. Both take descriptors we own.
    unsafe {
        check(libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            &raw const attr,
            std::mem::size_of::<libc::mount_attr>(),
        ))?;
        check(libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        ))?;
    }
    Ok(())
}

/// An overlay at `target`: `lower` directories (topmost first) under a
/// writable `upper`, without devices or set-user-id programs.
pub fn overlay(lower: &[&Path], upper: &Path, work: &Path, target: &Path) -> std::io::Result<()> {
    let lower: Vec<String> = lower.iter().map(|p| p.display().to_string()).collect();
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.join(":"),
        upper.display(),
        work.display()
    );
    mount(
        Path::new("overlay"),
        target,
        "overlay",
        libc::MS_NODEV | libc::MS_NOSUID,
        &options,
    )
}

/// Detaches whatever is mounted at `target`; nothing mounted there is no
/// error.
pub fn unmount(target: &Path) -> std::io::Result<()> {
    let target = c_path(target)?;
    // SAFETY: umount2(2) reads a NUL-terminated path.
    let result = unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    match check(result.into()) {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOENT)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether something is mounted at `path` (it is on another device, or
/// the same one mounted again, than its parent).
pub fn is_mount_point(path: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let wanted = path.display().to_string();
    mounts.lines().any(|line| {
        line.split_whitespace()
            .nth(4)
            .is_some_and(|point| unescape(point) == wanted)
    })
}

/// What is mounted at `path` (a loop device, say), by the topmost mount
/// there.
pub fn source_of(path: &Path) -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let wanted = path.display().to_string();
    mounts
        .lines()
        .rev()
        .filter(|line| {
            line.split_whitespace()
                .nth(4)
                .is_some_and(|point| unescape(point) == wanted)
        })
        .filter_map(|line| {
            let (_, after) = line.split_once(" - ")?;
            after.split_whitespace().nth(1).map(unescape)
        })
        .next()
}

/// A mountinfo field with its octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let code = bytes
            .get(i + 1..i + 4)
            .filter(|_| bytes[i] == b'\\')
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        if let Some(code) = code {
            out.push(code);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(r"/var/lib/a\040b"), "/var/lib/a b");
        assert_eq!(unescape("/plain"), "/plain");
    }
}
