//! The node's volumes. Local ones are each a disk (see `disk`) of exactly
//! the size sold, made when the control plane first lists it, mounted
//! under the agent's state directory (which no workload sees), grown in
//! place, and erased before its space is given back. They outlive
//! workloads, agent restarts and reboots: a volume's file stays, and is
//! mounted again. Shared ones are directories on the region's shared file
//! system (see `shared`).
//!
//! A local volume's files are stored with the ids its workloads have
//! inside (root is 0): each workload sees it through an idmapped mount
//! onto its own user namespace, so what one instance writes as root the
//! next one owns as root, whichever ids of the node they run under.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::disk::{Disks, GIB, size};
use crate::mounts;

/// What the node does with a volume, as the control plane says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VolumeAction {
    Keep,
    Erase,
}

/// A volume the control plane lists for this node.
#[derive(Debug, Clone, Deserialize)]
pub struct NodeVolume {
    pub volume_id: Uuid,
    pub size_gib: u64,
    pub action: VolumeAction,
    /// For a volume on the region's shared file system: where.
    #[serde(default)]
    pub shared: Option<SharedPlace>,
}

/// A shared volume's directory on the node, and the first id of its
/// organization's range: its files' root, and the ids its workloads run
/// under.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SharedPlace {
    pub path: PathBuf,
    pub owner_id: u32,
}

/// A volume a workload attaches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    pub volume_id: Uuid,
    pub mount_path: String,
    #[serde(default)]
    pub read_only: bool,
}

/// How a volume stands, for the control plane.
#[derive(Debug, Clone, Serialize)]
pub struct VolumeReport {
    pub volume_id: Uuid,
    pub size_gib: u64,
    pub used_bytes: u64,
    pub error: Option<String>,
    /// A shared volume asked to be erased, erased.
    pub erased: bool,
}

/// How the node's volumes stand, for its heartbeat.
#[derive(Debug, Clone, Default)]
pub struct VolumeStanding {
    pub reports: Vec<VolumeReport>,
    /// Room left for more local volumes.
    pub free_bytes: u64,
    /// Free space of the region's shared file system, where the node has
    /// shared volumes to look at it through.
    pub shared_free_bytes: Option<u64>,
}

/// A volume to show inside a workload.
#[derive(Debug, Clone)]
pub struct VolumeMount {
    /// Where the node has it mounted.
    pub source: PathBuf,
    /// The workload's path for it.
    pub target: String,
    pub read_only: bool,
    /// For a shared volume, the first id of its owner's range: its files
    /// carry those ids, so the workload must run under them.
    pub owner: Option<u32>,
}

pub struct Volumes {
    dir: PathBuf,
    disks: Disks,
    /// Free space the agent keeps for the node.
    reserve: u64,
    /// Why a volume could not be made or grown, until it can.
    errors: HashMap<Uuid, String>,
    /// The shared volumes the control plane lists for this node.
    shared: crate::shared::SharedVolumes,
}

impl Volumes {
    pub fn new(
        dir: &Path,
        disks: Disks,
        reserve_gib: u64,
        measure_every: std::time::Duration,
    ) -> Result<Self, String> {
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
            .map_err(|e| format!("preparing {}: {e}", dir.display()))?;
        Ok(Self {
            dir: dir.to_owned(),
            disks,
            reserve: reserve_gib.saturating_mul(GIB),
            errors: HashMap::new(),
            shared: crate::shared::SharedVolumes::new(measure_every),
        })
    }

    fn home(&self, id: Uuid) -> PathBuf {
        self.dir.join(id.to_string())
    }

    /// The file holding volume `id`'s disk.
    pub fn image(&self, id: Uuid) -> PathBuf {
        self.home(id).join("disk.img")
    }

    fn data(&self, id: Uuid) -> PathBuf {
        self.home(id).join("data")
    }

    /// Where volume `id` is mounted on the node, once it is, and for a
    /// shared one the first id of its owner's range.
    pub fn source(&self, id: Uuid) -> Option<(PathBuf, Option<u32>)> {
        if let Some(place) = self.shared.ready(id) {
            return Some((place.path.clone(), Some(place.owner_id)));
        }
        self.mounted(id).map(|data| (data, None))
    }

    /// Where local volume `id` is mounted on the node, once it is.
    fn mounted(&self, id: Uuid) -> Option<PathBuf> {
        let data = self.data(id);
        mounts::is_mount_point(&data).then_some(data)
    }

    /// Makes, mounts and grows the volumes to keep; erases those to erase
    /// that no workload (`in_use`) holds. A volume in use grows in place
    /// where the node allows it, else once it is free.
    pub fn reconcile(&mut self, wanted: &[NodeVolume], in_use: &HashSet<Uuid>) {
        self.shared.reconcile(wanted, in_use);
        for volume in wanted.iter().filter(|v| v.shared.is_none()) {
            let id = volume.volume_id;
            let done = match volume.action {
                VolumeAction::Keep => self.keep(
                    id,
                    volume.size_gib.saturating_mul(GIB),
                    in_use.contains(&id),
                ),
                VolumeAction::Erase if in_use.contains(&id) => Ok(()),
                VolumeAction::Erase => self.erase(id),
            };
            match done {
                Ok(()) => {
                    self.errors.remove(&id);
                }
                Err(why) => {
                    if self.errors.get(&id) != Some(&why) {
                        tracing::warn!(volume = %id, error = %why, "volume");
                    }
                    self.errors.insert(id, why);
                }
            }
        }
    }

    fn keep(&self, id: Uuid, bytes: u64, busy: bool) -> Result<(), String> {
        let (image, data) = (self.image(id), self.data(id));
        if !image.exists() {
            self.ensure_room(bytes, &format!("make a {} volume", size(bytes)))?;
            std::fs::create_dir_all(self.home(id))
                .map_err(|e| format!("making the volume's directory: {e}"))?;
            // Made for ids as workloads have them inside: its root is 0.
            if let Err(why) = self.disks.make(&image, bytes, 0) {
                std::fs::remove_dir_all(self.home(id)).ok();
                return Err(why);
            }
        }
        if !mounts::is_mount_point(&data) {
            self.disks.mount(&image, &data)?;
        }
        let now = std::fs::metadata(&image)
            .map_err(|e| format!("reading the volume's size: {e}"))?
            .len();
        if now < bytes {
            self.ensure_room(bytes - now, &format!("grow the volume to {}", size(bytes)))?;
            self.disks.grow(&image, &data, bytes, busy)?;
        }
        Ok(())
    }

    /// Refuses to take `more` bytes of the node's disk into the agent's
    /// reserve; `what` says what they were for.
    fn ensure_room(&self, more: u64, what: &str) -> Result<(), String> {
        let free = crate::disk::free_bytes(&self.dir)
            .map_err(|e| format!("reading the free space of {}: {e}", self.dir.display()))?;
        if free < more.saturating_add(self.reserve) {
            return Err(format!(
                "this node cannot {what}: {} is free and the agent keeps {} for the node",
                size(free),
                size(self.reserve)
            ));
        }
        Ok(())
    }

    /// Unmounts volume `id`, overwrites every byte it wrote with zeros, and
    /// removes it.
    fn erase(&self, id: Uuid) -> Result<(), String> {
        let home = self.home(id);
        if !home.exists() {
            return Ok(());
        }
        let data = self.data(id);
        mounts::unmount(&data).map_err(|e| format!("unmounting the volume: {e}"))?;
        if mounts::is_mount_point(&data) {
            return Err("the volume is still mounted".into());
        }
        let image = self.image(id);
        if image.exists() {
            zero_written(&image).map_err(|e| format!("erasing the volume: {e}"))?;
        }
        std::fs::remove_dir_all(&home).map_err(|e| format!("removing the volume: {e}"))
    }

    /// How each volume on the node stands (those it could not make
    /// included, shared ones too), the room left for more local ones, and
    /// the shared file system's free space.
    pub fn standing(&mut self) -> VolumeStanding {
        let mut reports: Vec<VolumeReport> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<Uuid>().ok())
            .filter_map(|id| {
                let data = self.mounted(id)?;
                let size = std::fs::metadata(self.image(id)).ok()?.len();
                let (_, used) = crate::disk::usage(&data).ok()?;
                Some(VolumeReport {
                    volume_id: id,
                    size_gib: size / GIB,
                    used_bytes: used,
                    error: self.errors.get(&id).cloned(),
                    erased: false,
                })
            })
            .collect();
        let made: HashSet<Uuid> = reports.iter().map(|r| r.volume_id).collect();
        reports.extend(
            self.errors
                .iter()
                .filter(|(id, _)| !made.contains(id))
                .map(|(id, why)| VolumeReport {
                    volume_id: *id,
                    size_gib: 0,
                    used_bytes: 0,
                    error: Some(why.clone()),
                    erased: false,
                }),
        );
        reports.extend(self.shared.reports());
        reports.sort_by_key(|r| r.volume_id);
        let free = crate::disk::free_bytes(&self.dir)
            .unwrap_or(0)
            .saturating_sub(self.reserve);
        VolumeStanding {
            reports,
            free_bytes: free,
            shared_free_bytes: self.shared.free_bytes(),
        }
    }
}

/// Writes zeros over every range of `image` that holds data (its holes and
/// never-written space read as zeros already), and waits until they are
/// on the disk.
pub fn zero_written(image: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    use std::os::unix::fs::OpenOptionsExt;
    // Never through a link: a tenant's file may be one.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(image)?;
    let length = i64::try_from(file.metadata()?.len()).map_err(std::io::Error::other)?;
    let fd = file.as_raw_fd();
    let seek = |offset: i64, whence: i32| {
        // SAFETY: lseek(2) on a descriptor we own.
        let at = unsafe { libc::lseek(fd, offset, whence) };
        if at < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(at)
        }
    };
    let zeros = vec![0u8; 1 << 20];
    let mut offset = 0;
    while offset < length {
        let start = match seek(offset, libc::SEEK_DATA) {
            Ok(start) => start,
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => break,
            // A file system that cannot tell data from holes: all of it.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => offset,
            Err(e) => return Err(e),
        };
        let end = seek(start, libc::SEEK_HOLE).unwrap_or(length).min(length);
        let mut at = start;
        while at < end {
            let chunk = usize::try_from((end - at).min(1 << 20)).map_err(std::io::Error::other)?;
            file.write_all_at(
                &zeros[..chunk],
                u64::try_from(at).map_err(std::io::Error::other)?,
            )?;
            at += i64::try_from(chunk).map_err(std::io::Error::other)?;
        }
        offset = end;
    }
    file.sync_data()
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Seek, SeekFrom, Write};

    use super::zero_written;

    #[test]
    fn erasing_leaves_none_of_the_written_bytes() {
        let path = std::env::temp_dir().join(format!("gantry-erase-{}", uuid::Uuid::now_v7()));
        let mut file = std::fs::File::create(&path).expect("file");
        let secret = b"tenant secret, must not survive";
        file.write_all(secret).expect("write");
        // A hole in the middle, then more data after it.
        file.seek(SeekFrom::Start(8 << 20)).expect("seek");
        file.write_all(secret).expect("write");
        drop(file);
        zero_written(&path).expect("erase");
        let mut bytes = Vec::new();
        std::fs::File::open(&path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .expect("read");
        std::fs::remove_file(&path).ok();
        assert_eq!(bytes.len(), (8 << 20) + secret.len(), "the size stays");
        assert!(bytes.iter().all(|b| *b == 0), "a written byte survived");
    }
}
