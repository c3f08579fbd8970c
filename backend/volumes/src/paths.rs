//! Where a workload may see a volume: an absolute, plain path that hides
//! nothing the workload's system needs.

/// The longest mount path.
pub const MOUNT_PATH_MAX: usize = 255;

/// Directories a volume may not cover: the root, the kernel's and the
/// runtime's file systems (also anything beneath them), and the system's
/// own programs and settings.
const COVERS_BENEATH: &[&str] = &["/proc", "/sys", "/dev", "/run"];
const COVERS: &[&str] = &[
    "/", "/bin", "/boot", "/etc", "/lib", "/lib32", "/lib64", "/sbin", "/usr", "/var",
];

/// Why `path` cannot be a mount path, or none when it can.
pub fn refusal(path: &str) -> Option<String> {
    if let Some(why) = shape_refusal(path) {
        return Some(why);
    }
    if COVERS.contains(&path) {
        return Some(format!(
            "{path} holds the system; mount the volume below it or elsewhere"
        ));
    }
    if let Some(system) = COVERS_BENEATH
        .iter()
        .find(|dir| path == **dir || path.starts_with(&format!("{dir}/")))
    {
        return Some(format!("{system} belongs to the kernel and the runtime"));
    }
    None
}

/// Why `path` is not an absolute, plain path of at most
/// [`MOUNT_PATH_MAX`] bytes, or none when it is.
pub fn shape_refusal(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return Some("must be an absolute path, starting with '/'".into());
    }
    if path.len() > MOUNT_PATH_MAX {
        return Some(format!("must be at most {MOUNT_PATH_MAX} bytes"));
    }
    if path.chars().any(char::is_control) {
        return Some("must not contain control characters".into());
    }
    if path.len() > 1 && path.ends_with('/') {
        return Some("must not end with '/'".into());
    }
    if path.len() > 1
        && path[1..]
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Some("must be plain: no empty, '.' or '..' parts".into());
    }
    None
}

/// Whether one of two mount paths lies inside the other (or they are the
/// same): a workload would see only one of them.
pub fn overlap(a: &str, b: &str) -> bool {
    let inside =
        |outer: &str, inner: &str| inner == outer || inner.starts_with(&format!("{outer}/"));
    inside(a, b) || inside(b, a)
}

#[cfg(test)]
mod tests {
    use super::{overlap, refusal};

    #[test]
    fn plain_absolute_paths_outside_the_system_are_taken() {
        for path in [
            "/data",
            "/checkpoints/run-1",
            "/usr/local/models",
            "/home/me",
            "/tmp/x",
        ] {
            assert_eq!(refusal(path), None, "{path}");
        }
    }

    #[test]
    fn roots_system_directories_and_tricks_are_refused() {
        for path in [
            "",
            "data",
            "./data",
            "/",
            "/proc",
            "/proc/1",
            "/dev",
            "/dev/shm",
            "/sys/fs",
            "/run/secrets",
            "/etc",
            "/usr",
            "/data/",
            "/data//x",
            "/data/../etc",
            "/a/./b",
            "/..",
            "/data\n",
        ] {
            assert!(refusal(path).is_some(), "{path:?} was taken");
        }
        assert!(refusal(&format!("/{}", "a".repeat(255))).is_some());
    }

    #[test]
    fn nested_or_equal_paths_overlap() {
        assert!(overlap("/data", "/data"));
        assert!(overlap("/data", "/data/x"));
        assert!(overlap("/data/x", "/data"));
        assert!(!overlap("/data", "/database"));
        assert!(!overlap("/a", "/b"));
    }
}
