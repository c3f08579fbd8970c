//! Disks of an exact size as files on the node's disk: an ext4 file system
//! in a file whose space is allocated whole when it is made or grown (so
//! the node's free space is spent at once, never later behind the agent's
//! back), mounted through a loop device. Writing past one fails with
//! ENOSPC inside and nowhere else. Workloads' roots and local volumes are
//! such disks.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const GIB: u64 = 1024 * 1024 * 1024;

/// The programs disks need.
#[derive(Debug, Clone)]
pub struct Disks {
    mkfs: PathBuf,
    mount: PathBuf,
    losetup: PathBuf,
    resize2fs: PathBuf,
    e2fsck: PathBuf,
}

impl Disks {
    pub fn find() -> Result<Self, String> {
        let find = |name: &str, package: &str| {
            crate::runtime::find_program(name)
                .ok_or_else(|| format!("disks need {name}: install the Debian package `{package}`"))
        };
        Ok(Self {
            mkfs: find("mkfs.ext4", "e2fsprogs")?,
            mount: find("mount", "mount")?,
            losetup: find("losetup", "mount")?,
            resize2fs: find("resize2fs", "e2fsprogs")?,
            e2fsck: find("e2fsck", "e2fsprogs")?,
        })
    }

    /// Makes an ext4 file system of `bytes` in the file `image` (its space
    /// allocated now), its root directory owned by `owner`.
    pub fn make(&self, image: &Path, bytes: u64, owner: u32) -> Result<(), String> {
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
        let file = std::fs::File::create(image).map_err(|e| fail("making a disk", &e))?;
        allocate(&file, bytes).map_err(|e| fail("allocating a disk", &e))?;
        drop(file);
        run(Command::new(&self.mkfs)
            .args(["-q", "-F", "-m", "0", "-E"])
            .arg(format!("nodiscard,root_owner={owner}:{owner}"))
            .arg(image))
        .map_err(|e| fail("formatting a disk", &e))?;
        // mkfs zeroes some ranges by punching holes in a file: they are
        // taken again, so the node's space is all spent now (and mounted
        // without background inode table zeroing, which punches more).
        reallocate(image, bytes)
    }

    /// Mounts the disk in `image` at `dir`, without devices or set-user-id
    /// programs.
    pub fn mount(&self, image: &Path, dir: &Path) -> Result<(), String> {
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
        std::fs::create_dir_all(dir).map_err(|e| fail("making a disk's mount point", &e))?;
        // Direct I/O from the loop device to the file: one page cache, not
        // two (writes run at the node's disk's speed, not a quarter of it).
        let device = output(
            Command::new(&self.losetup)
                .args(["--find", "--show", "--direct-io=on"])
                .arg(image),
        )
        .map_err(|e| fail("attaching a disk", &e))?;
        let device = device.trim().to_owned();
        let mounted = run(Command::new(&self.mount)
            .args([
                "-t",
                "ext4",
                "-o",
                "nodiscard,noinit_itable,nosuid,nodev",
                &device,
            ])
            .arg(dir));
        // Detached now, the device goes when its file system is unmounted.
        run(Command::new(&self.losetup).args(["--detach", &device]))
            .map_err(|e| fail("detaching a disk", &e))?;
        mounted.map_err(|e| fail("mounting a disk", &e))
    }

    /// Grows the disk in `image`, mounted at `dir`, to `bytes`: in place
    /// while mounted (its file, then its loop device, then its file
    /// system), which the kernel allows only to a root holding
    /// CAP_SYS_RESOURCE; without it, and only when `busy` is false,
    /// unmounted, checked, grown and mounted again. A grow that cannot be
    /// done leaves the disk as it was.
    pub fn grow(&self, image: &Path, dir: &Path, bytes: u64, busy: bool) -> Result<(), String> {
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
        let before = std::fs::metadata(image)
            .map_err(|e| fail("reading the disk's size", &e))?
            .len();
        let device = crate::mounts::source_of(dir)
            .ok_or_else(|| format!("{} is not mounted", dir.display()))?;
        reallocate(image, bytes)?;
        let online = run(Command::new(&self.losetup).args(["--set-capacity", &device]))
            .and_then(|()| run(Command::new(&self.resize2fs).arg(&device)));
        let Err(why) = online else {
            return Ok(());
        };
        if busy {
            shrink_back(image, before);
            return Err(format!(
                "the disk grows once no workload uses it (this node cannot grow it in use: {why})"
            ));
        }
        crate::mounts::unmount(dir).map_err(|e| fail("unmounting the disk to grow it", &e))?;
        let offline = run(Command::new(&self.e2fsck).args(["-f", "-p"]).arg(image))
            .and_then(|()| run(Command::new(&self.resize2fs).arg(image)));
        if let Err(why) = &offline {
            shrink_back(image, before);
            tracing::warn!(image = %image.display(), error = %why, "cannot grow a disk");
        }
        self.mount(image, dir)?;
        offline.map_err(|e| fail("growing the file system", &e))
    }
}

/// Gives back what a failed grow took: the file system never reached it.
fn shrink_back(image: &Path, bytes: u64) {
    if let Err(error) = std::fs::OpenOptions::new()
        .write(true)
        .open(image)
        .and_then(|f| f.set_len(bytes))
    {
        tracing::warn!(image = %image.display(), %error, "cannot give back a failed grow");
    }
}

fn reallocate(image: &Path, bytes: u64) -> Result<(), String> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(image)
        .map_err(|e| format!("opening a disk: {e}"))?;
    allocate(&file, bytes).map_err(|e| format!("allocating a disk: {e}"))
}

/// "1.5 GiB", "512 MiB".
pub fn size(bytes: u64) -> String {
    if bytes >= GIB {
        format!("{:.1} GiB", bytes as f64 / GIB as f64)
    } else {
        format!("{} MiB", bytes / (1024 * 1024))
    }
}

/// Free bytes of the file system holding `path`, and bytes its files use.
pub fn usage(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: statvfs(3) fills the struct on this stack from a
    // NUL-terminated path.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &raw mut stat) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let free = stat.f_bavail.saturating_mul(stat.f_frsize);
    let used = (stat.f_blocks.saturating_sub(stat.f_bfree)).saturating_mul(stat.f_frsize);
    Ok((free, used))
}

pub fn free_bytes(path: &Path) -> std::io::Result<u64> {
    usage(path).map(|(free, _)| free)
}

/// Reserves `bytes` for `file` on the node's disk now.
fn allocate(file: &std::fs::File, bytes: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let length = i64::try_from(bytes).map_err(std::io::Error::other)?;
    // SAFETY: fallocate(2) on a descriptor we own.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, length) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn run(command: &mut Command) -> Result<(), String> {
    output(command).map(drop)
}

/// What `command` printed, or what it said on failing.
fn output(command: &mut Command) -> Result<String, String> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::size;

    #[test]
    fn sizes_read_as_people_say_them() {
        assert_eq!(size(3 * 1024 * 1024 * 1024 / 2), "1.5 GiB");
        assert_eq!(size(512 * 1024 * 1024), "512 MiB");
    }
}
