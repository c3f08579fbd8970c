//! Each workload's root file system: the layers of its image, shown with
//! their owners shifted into the workload's user namespace (idmapped
//! mounts, read-only), under a writable layer of its own on a disk of the
//! size its instance type sells. The disk is an ext4 image of exactly that
//! size, allocated whole when the workload starts (so the node's free
//! space is spent at once, never later behind the agent's back) and
//! mounted through a loop device: writing past it fails with ENOSPC inside
//! the workload and nowhere else. Everything stays mounted while the
//! workload lives, agent restarts included, and goes when it ends.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use uuid::Uuid;

use crate::images::Image;
use crate::{mounts, userns};

const GIB: u64 = 1024 * 1024 * 1024;

/// Directories every root has, made when its image lacks them: `/tmp`
/// and `/scratch` live on the workload's disk.
const DIRS: &[(&str, u32)] = &[("tmp", 0o1777), ("scratch", 0o755), ("root", 0o700)];

/// Where workloads' roots are made, and how much of the node's disk they
/// may take.
#[derive(Debug, Clone)]
pub struct Roots {
    dir: PathBuf,
    mkfs: PathBuf,
    mount: PathBuf,
    losetup: PathBuf,
    /// Free space the agent keeps for the node: a disk that would eat into
    /// it is refused.
    reserve: u64,
}

/// One workload's root, by its paths.
#[derive(Debug, Clone)]
pub struct Root {
    dir: PathBuf,
    /// Its file system, as the workload sees it at `/`.
    pub tree: PathBuf,
    /// Its `/dev/shm`, shared by its processes and its SSH sessions.
    pub shm: PathBuf,
    /// Its user namespace, pinned.
    pub userns: PathBuf,
}

impl Root {
    /// Its `/etc/hosts` on a private network (see `names`): beside its
    /// file system, where the workload cannot change it.
    pub fn hosts(&self) -> PathBuf {
        self.dir.join("hosts")
    }

    fn disk_image(&self) -> PathBuf {
        self.dir.join("disk.img")
    }

    fn disk(&self) -> PathBuf {
        self.dir.join("disk")
    }

    fn layers(&self) -> PathBuf {
        self.dir.join("layers")
    }
}

impl Roots {
    /// Finds the programs roots need (mkfs.ext4, mount).
    pub fn new(dir: &Path, reserve_gib: u64) -> Result<Self, String> {
        let mkfs = crate::runtime::find_program("mkfs.ext4")
            .ok_or("workloads' disks need mkfs.ext4: install the Debian package `e2fsprogs`")?;
        let mount = crate::runtime::find_program("mount")
            .ok_or("workloads' disks need mount: install the Debian package `mount`")?;
        let losetup = crate::runtime::find_program("losetup")
            .ok_or("workloads' disks need losetup: install the Debian package `mount`")?;
        std::fs::create_dir_all(dir).map_err(|e| format!("making {}: {e}", dir.display()))?;
        Ok(Self {
            dir: dir.to_owned(),
            mkfs,
            mount,
            losetup,
            reserve: reserve_gib * GIB,
        })
    }

    /// Makes an ext4 file system of `bytes` in the file `image` (its space
    /// allocated now), owned by `owner`, and mounts it at `dir`.
    pub fn disk(&self, image: &Path, dir: &Path, bytes: u64, owner: u32) -> Result<(), String> {
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
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(image)
            .map_err(|e| fail("opening a disk", &e))?;
        allocate(&file, bytes).map_err(|e| fail("allocating a disk", &e))?;
        drop(file);
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

    pub fn root(&self, id: Uuid) -> Root {
        let dir = self.dir.join(id.to_string());
        Root {
            tree: dir.join("tree"),
            shm: dir.join("shm"),
            userns: dir.join("userns"),
            dir,
        }
    }

    /// Makes workload `id`'s root from `image` for a user namespace whose
    /// root is the node's `first_id`, with a disk of `disk` bytes and a
    /// `/dev/shm` of `shm_mib`; on failure nothing of it stays.
    pub fn prepare(
        &self,
        id: Uuid,
        first_id: u32,
        image: &Image,
        disk: u64,
        shm_mib: u64,
    ) -> Result<Root, String> {
        let root = self.root(id);
        // A root left by an earlier attempt of the same order goes first.
        if !self.remove(id) {
            return Err("the previous attempt's root is still in use".into());
        }
        if image.size > disk {
            return Err(format!(
                "the image {} is {} unpacked, larger than the instance's {} disk",
                image.reference,
                size(image.size),
                size(disk)
            ));
        }
        let free = free_bytes(&self.dir)
            .map_err(|e| format!("reading the free space of {}: {e}", self.dir.display()))?;
        if free < disk.saturating_add(self.reserve) {
            return Err(format!(
                "this node cannot give the workload its {} disk: {} is free and the agent keeps {} \
                 for the node",
                size(disk),
                size(free),
                size(self.reserve)
            ));
        }
        let made = self.make(&root, first_id, image, disk, shm_mib);
        if made.is_err() {
            self.remove(id);
        }
        made.map(|()| root)
    }

    fn make(
        &self,
        root: &Root,
        first_id: u32,
        image: &Image,
        disk: u64,
        shm_mib: u64,
    ) -> Result<(), String> {
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
        // Its own root passes through it to start it; nobody else may.
        make_owned(&root.dir, first_id, 0o700)
            .map_err(|e| fail("making the root's directory", &e))?;
        userns::create(first_id, &root.userns)?;
        let disk_dir = root.disk();
        self.disk(&root.disk_image(), &disk_dir, disk, first_id)?;
        let (upper, work) = (disk_dir.join("upper"), disk_dir.join("work"));
        for dir in [&upper, &work] {
            make_owned(dir, first_id, 0o755).map_err(|e| fail("preparing the disk", &e))?;
        }
        let ns = userns::open(&root.userns).map_err(|e| fail("opening the user namespace", &e))?;
        let mut lowers = Vec::with_capacity(image.layers.len());
        for (i, layer) in image.layers.iter().enumerate() {
            let target = root.layers().join(i.to_string());
            std::fs::create_dir_all(&target)
                .map_err(|e| fail("making a layer's mount point", &e))?;
            mounts::idmapped(layer, &target, &ns).map_err(|e| {
                fail(
                    &format!("showing layer {} of the image", layer.display()),
                    &e,
                )
            })?;
            lowers.push(target);
        }
        std::fs::create_dir_all(&root.tree)
            .map_err(|e| fail("making the root's mount point", &e))?;
        let lowers: Vec<&Path> = lowers.iter().map(PathBuf::as_path).collect();
        mounts::overlay(&lowers, &upper, &work, &root.tree)
            .map_err(|e| fail("stacking the image under the workload's layer", &e))?;
        for (dir, mode) in DIRS {
            let path = root.tree.join(dir);
            if !path.is_dir() {
                make_owned(&path, first_id, *mode).map_err(|e| fail("preparing the root", &e))?;
            }
        }
        std::fs::create_dir_all(&root.shm).map_err(|e| fail("making /dev/shm", &e))?;
        mounts::mount(
            Path::new("tmpfs"),
            &root.shm,
            "tmpfs",
            libc::MS_NOSUID | libc::MS_NODEV,
            &format!(
                "size={}m,mode=1777,uid={first_id},gid={first_id}",
                shm_mib.max(1)
            ),
        )
        .map_err(|e| fail("mounting /dev/shm", &e))?;
        Ok(())
    }

    /// Unmounts and deletes workload `id`'s root; false while something of
    /// it cannot be unmounted yet (asked again later). Its files are only
    /// deleted once nothing is mounted under them.
    pub fn remove(&self, id: Uuid) -> bool {
        let root = self.root(id);
        if !root.dir.exists() {
            return true;
        }
        let mut points = vec![root.tree.clone(), root.shm.clone()];
        if let Ok(layers) = std::fs::read_dir(root.layers()) {
            points.extend(layers.flatten().map(|e| e.path()));
        }
        points.push(root.disk());
        for point in &points {
            if let Err(error) = mounts::unmount(point) {
                tracing::warn!(order = %id, %error, "cannot unmount {}", point.display());
            }
        }
        userns::release(&root.userns);
        if points.iter().any(|p| mounts::is_mount_point(p)) {
            return false;
        }
        match std::fs::remove_dir_all(&root.dir) {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(order = %id, %error, "cannot remove {}", root.dir.display());
                false
            }
        }
    }
}

/// "1.5 GiB", "512 MiB".
fn size(bytes: u64) -> String {
    if bytes >= GIB {
        format!("{:.1} GiB", bytes as f64 / GIB as f64)
    } else {
        format!("{} MiB", bytes / (1024 * 1024))
    }
}

fn free_bytes(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: statvfs(3) fills the struct on this stack from a
    // NUL-terminated path.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &raw mut stat) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
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

fn make_owned(path: &Path, owner: u32, mode: u32) -> std::io::Result<()> {
    std::fs::create_dir_all(path)?;
    std::os::unix::fs::chown(path, Some(owner), Some(owner))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
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
