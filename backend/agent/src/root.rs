//! Each workload's root file system: the layers of its image, shown with
//! their owners shifted into the workload's user namespace (idmapped
//! mounts, read-only), under a writable layer of its own on a disk (see
//! `disk`) of the size its instance type sells, made when the workload
//! starts. Everything stays mounted while the workload lives, agent
//! restarts included, and goes when it ends.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::disk::{Disks, GIB, size};
use crate::images::Image;
use crate::volumes::VolumeMount;
use crate::{mounts, userns};

/// Directories every root has, made when its image lacks them: `/tmp`
/// and `/scratch` live on the workload's disk.
const DIRS: &[(&str, u32)] = &[("tmp", 0o1777), ("scratch", 0o755), ("root", 0o700)];

/// Where workloads' roots are made, and how much of the node's disk they
/// may take.
#[derive(Debug, Clone)]
pub struct Roots {
    dir: PathBuf,
    disks: Disks,
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
        let disks = Disks::find().map_err(|e| format!("workloads' {e}"))?;
        std::fs::create_dir_all(dir).map_err(|e| format!("making {}: {e}", dir.display()))?;
        Ok(Self {
            dir: dir.to_owned(),
            disks,
            reserve: reserve_gib * GIB,
        })
    }

    /// The programs disks need, for other disks of the node.
    pub fn disks(&self) -> &Disks {
        &self.disks
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
        let free = crate::disk::free_bytes(&self.dir)
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
        self.disks.make(&root.disk_image(), disk, first_id)?;
        self.disks.mount(&root.disk_image(), &disk_dir)?;
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
            mounts::idmapped(layer, &target, &ns, true).map_err(|e| {
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

    /// Shows each of `volumes` at its path in `root`: a local one owned as
    /// the workload's user namespace maps the ids stored on it, a shared
    /// one as stored (the workload runs under its owner's ids). A path's
    /// missing directories are made, owned by the workload's root; a path
    /// through a symbolic link or a file of the image is refused, since
    /// the node would follow the link out of the root.
    pub fn attach(
        &self,
        root: &Root,
        first_id: u32,
        volumes: &[VolumeMount],
    ) -> Result<(), String> {
        if volumes.is_empty() {
            return Ok(());
        }
        let ns =
            userns::open(&root.userns).map_err(|e| format!("opening the user namespace: {e}"))?;
        for volume in volumes {
            let target = mount_point_in(&root.tree, &volume.target, first_id)?;
            // A shared volume's files carry the ids its workloads run
            // under already; a local one's are shifted onto them.
            let shift = volume.owner.is_none().then_some(&ns);
            mounts::shown(&volume.source, &target, shift, volume.read_only)
                .map_err(|e| format!("mounting a volume at {}: {e}", volume.target))?;
        }
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

/// The directory `path` (absolute, plain) inside `tree`, made where
/// missing, never through a symbolic link.
fn mount_point_in(tree: &Path, path: &str, owner: u32) -> Result<PathBuf, String> {
    let mut at = tree.to_path_buf();
    let mut shown = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        if part == "." || part == ".." {
            return Err(format!("the mount path {path} is not plain"));
        }
        at.push(part);
        shown.push('/');
        shown.push_str(part);
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(format!(
                    "the image has a symbolic link at {shown}: mount the volume elsewhere"
                ));
            }
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(format!(
                    "the image has a file at {shown}: mount the volume elsewhere"
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                make_owned(&at, owner, 0o755)
                    .map_err(|e| format!("making the mount point {shown}: {e}"))?;
            }
            Err(e) => return Err(format!("reading {shown} in the image: {e}")),
        }
    }
    Ok(at)
}

fn make_owned(path: &Path, owner: u32, mode: u32) -> std::io::Result<()> {
    std::fs::create_dir_all(path)?;
    std::os::unix::fs::chown(path, Some(owner), Some(owner))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}
