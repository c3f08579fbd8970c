//! The region's shared volumes as this node sees them: each a directory
//! on the shared file system the operator mounts at the same path on every
//! node of the region. The node that tends the region makes each
//! directory, measures what its files take (a shared file system without
//! quotas cannot refuse a write past the size sold, so the control plane
//! refuses new attachments instead) and erases it when it is deleted; any
//! node whose workloads attach one makes sure it is there.
//!
//! A volume's directory belongs to its organization's root (the first id
//! of its range) with mode 0700: no other range may enter it, and no
//! workload sees the file system's root at all.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::volumes::{NodeVolume, SharedPlace, VolumeAction, VolumeReport};

pub struct SharedVolumes {
    /// How long a measure of a volume's files holds: walking a large tree
    /// on a distributed file system is not free.
    measure_every: Duration,
    known: HashMap<Uuid, Known>,
}

struct Known {
    place: SharedPlace,
    size_gib: u64,
    action: VolumeAction,
    made: bool,
    /// Bytes its files took, and when that was measured.
    used: Option<(u64, Instant)>,
    erased: bool,
    error: Option<String>,
}

impl SharedVolumes {
    pub fn new(measure_every: Duration) -> Self {
        Self {
            measure_every,
            known: HashMap::new(),
        }
    }

    /// Makes the shared volumes to keep, erases those to erase that no
    /// workload (`in_use`) holds, and forgets those no longer listed.
    pub fn reconcile(&mut self, wanted: &[NodeVolume], in_use: &HashSet<Uuid>) {
        let listed: HashSet<Uuid> = wanted
            .iter()
            .filter(|v| v.shared.is_some())
            .map(|v| v.volume_id)
            .collect();
        self.known.retain(|id, _| listed.contains(id));
        for volume in wanted {
            let Some(place) = &volume.shared else {
                continue;
            };
            let known = self.known.entry(volume.volume_id).or_insert_with(|| Known {
                place: place.clone(),
                size_gib: volume.size_gib,
                action: volume.action,
                made: false,
                used: None,
                erased: false,
                error: None,
            });
            known.place.clone_from(place);
            known.size_gib = volume.size_gib;
            known.action = volume.action;
            let done = match volume.action {
                VolumeAction::Keep => make(place).map(|()| known.made = true),
                VolumeAction::Erase if in_use.contains(&volume.volume_id) || known.erased => Ok(()),
                VolumeAction::Erase => erase(&place.path).map(|()| {
                    known.made = false;
                    known.erased = true;
                    known.used = None;
                }),
            };
            match done {
                Ok(()) => known.error = None,
                Err(why) => {
                    if known.error.as_ref() != Some(&why) {
                        tracing::warn!(volume = %volume.volume_id, error = %why, "shared volume");
                    }
                    known.error = Some(why);
                }
            }
        }
    }

    /// Where shared volume `id` is, once it is there to attach.
    pub fn ready(&self, id: Uuid) -> Option<&SharedPlace> {
        self.known
            .get(&id)
            .filter(|k| k.made && k.action == VolumeAction::Keep)
            .map(|k| &k.place)
    }

    /// Free bytes of the shared file system, seen through a volume the
    /// node was told of.
    pub fn free_bytes(&self) -> Option<u64> {
        let place = self.known.values().find(|k| k.made)?;
        let root = place.place.path.parent()?.parent()?;
        crate::disk::free_bytes(root).ok()
    }

    /// How each listed shared volume stands, measuring those whose last
    /// measure is older than allowed.
    pub fn reports(&mut self) -> Vec<VolumeReport> {
        let every = self.measure_every;
        self.known
            .iter_mut()
            .map(|(id, known)| {
                if known.made
                    && known.action == VolumeAction::Keep
                    && known.used.is_none_or(|(_, at)| at.elapsed() >= every)
                {
                    match tree_bytes(&known.place.path) {
                        Ok(bytes) => known.used = Some((bytes, Instant::now())),
                        Err(e) => known.error = Some(format!("measuring the volume's files: {e}")),
                    }
                }
                VolumeReport {
                    volume_id: *id,
                    size_gib: if known.made { known.size_gib } else { 0 },
                    used_bytes: known.used.map_or(0, |(bytes, _)| bytes),
                    error: known.error.clone(),
                    erased: known.erased,
                }
            })
            .collect()
    }
}

/// Makes the volume's directory where it is missing, its organization's
/// root's alone; refuses where the shared file system is not mounted, so
/// a volume never lands on the node's own disk by mistake.
fn make(place: &SharedPlace) -> Result<(), String> {
    let volumes = place
        .path
        .parent()
        .ok_or_else(|| format!("{} is no volume's directory", place.path.display()))?;
    let root = volumes.parent().unwrap_or(volumes);
    if !crate::mounts::is_mount_point(root) {
        return Err(format!(
            "the region's shared file system is not mounted at {} on this node",
            root.display()
        ));
    }
    if place.path.is_dir() {
        return Ok(());
    }
    let fail = |what: &str, e: std::io::Error| format!("{what} on the shared file system: {e}");
    std::fs::create_dir_all(volumes)
        .and_then(|()| std::fs::set_permissions(volumes, std::fs::Permissions::from_mode(0o711)))
        .map_err(|e| fail("preparing the volumes' directory", e))?;
    match std::fs::create_dir(&place.path) {
        Ok(()) => {}
        // Another node of the region made it first.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(fail("making the volume's directory", e)),
    }
    std::os::unix::fs::chown(&place.path, Some(place.owner_id), Some(place.owner_id))
        .and_then(|()| {
            std::fs::set_permissions(&place.path, std::fs::Permissions::from_mode(0o700))
        })
        .map_err(|e| fail("giving the volume to its organization", e))
}

/// Overwrites every byte of every file under `dir` with zeros, then
/// removes it all: a distributed file system gives freed blocks to others.
/// Links are removed, never followed.
fn erase(dir: &Path) -> Result<(), String> {
    if !dir.exists() {
        return Ok(());
    }
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        let entries = std::fs::read_dir(&at)
            .map_err(|e| format!("reading {} to erase it: {e}", at.display()))?;
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                pending.push(entry.path());
            } else if kind.is_file() {
                crate::volumes::zero_written(&entry.path())
                    .map_err(|e| format!("erasing {}: {e}", entry.path().display()))?;
            }
        }
    }
    std::fs::remove_dir_all(dir).map_err(|e| format!("removing the volume: {e}"))
}

/// Bytes the files under `dir` take on their file system (as `du`
/// counts: allocated blocks, each file once however many links it has),
/// never following a link.
fn tree_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut total = std::fs::symlink_metadata(dir)?.blocks() * 512;
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        let entries = match std::fs::read_dir(&at) {
            Ok(entries) => entries,
            // Removed by a workload while it was walked.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.nlink() > 1 && !meta.is_dir() && !seen.insert((meta.dev(), meta.ino())) {
                continue;
            }
            total = total.saturating_add(meta.blocks().saturating_mul(512));
            if meta.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::{erase, tree_bytes};

    #[test]
    fn a_tree_is_measured_once_per_file_and_erased_without_following_links() {
        let dir = std::env::temp_dir().join(format!("gantry-shared-{}", uuid::Uuid::now_v7()));
        let outside = dir.with_extension("outside");
        std::fs::create_dir_all(dir.join("a/b")).expect("dirs");
        std::fs::write(&outside, b"not the volume's").expect("outside file");
        std::fs::write(dir.join("a/b/data"), vec![7u8; 1 << 20]).expect("file");
        std::fs::hard_link(dir.join("a/b/data"), dir.join("a/again")).expect("link");
        std::os::unix::fs::symlink(&outside, dir.join("a/out")).expect("symlink");
        let bytes = tree_bytes(&dir).expect("measure");
        assert!(
            (1 << 20..2 << 20).contains(&bytes),
            "a hard-linked file counts once: {bytes}"
        );
        erase(&dir).expect("erase");
        assert!(!dir.exists());
        assert_eq!(
            std::fs::read(&outside).expect("outside file"),
            b"not the volume's",
            "a link out of the volume is not followed"
        );
        std::fs::remove_file(&outside).ok();
    }
}
