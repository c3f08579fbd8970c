//! The NVIDIA driver's user-space files that a GPU workload needs from the
//! node, as NVIDIA's container toolkit hands them to containers: the
//! libraries that must match the kernel module (`libcuda`, `libnvidia-ml`,
//! the JIT compilers) and the tools that talk to it (`nvidia-smi`). Images
//! do not carry them: each is shown read-only under `/usr/local/nvidia`,
//! where CUDA images look (`LD_LIBRARY_PATH` and `PATH` name it, and
//! Gantry adds it for images that do not).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the libraries appear inside a workload.
pub const LIB_DIR: &str = "/usr/local/nvidia/lib64";
/// Where the tools appear inside a workload.
pub const BIN_DIR: &str = "/usr/local/nvidia/bin";

/// The libraries (by the start of their names) that belong to the driver.
const LIBRARIES: &[&str] = &[
    "libcuda.so",
    "libcudadebugger.so",
    "libnvidia-ml.so",
    "libnvidia-ptxjitcompiler.so",
    "libnvidia-nvvm.so",
    "libnvidia-gpucomp.so",
    "libnvidia-allocator.so",
    "libnvidia-cfg.so",
    "libnvidia-opencl.so",
    "libnvidia-pkcs11.so",
    "libnvidia-pkcs11-openssl3.so",
];
/// The driver's tools a workload may run.
const PROGRAMS: &[&str] = &["nvidia-smi", "nvidia-debugdump", "nvidia-cuda-mps-control"];

/// One file: where it is on the node, where the workload sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverFile {
    pub host: PathBuf,
    pub inside: PathBuf,
}

/// The driver's files on this node (none where it has no NVIDIA driver).
pub fn discover() -> Vec<DriverFile> {
    let listed = crate::runtime::find_program("ldconfig")
        .and_then(|ldconfig| Command::new(ldconfig).arg("-p").output().ok())
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default();
    let mut files: Vec<DriverFile> = libraries(&listed)
        .into_iter()
        .filter_map(|(name, path)| {
            Some(DriverFile {
                host: std::fs::canonicalize(path).ok()?,
                inside: Path::new(LIB_DIR).join(name),
            })
        })
        .collect();
    files.extend(PROGRAMS.iter().filter_map(|name| {
        Some(DriverFile {
            host: std::fs::canonicalize(crate::runtime::find_program(name)?).ok()?,
            inside: Path::new(BIN_DIR).join(name),
        })
    }));
    files
}

/// The driver's libraries of this machine's architecture in `ldconfig -p`'s
/// list, by the name programs load them by (`libcuda.so.1`).
fn libraries(listed: &str) -> Vec<(String, PathBuf)> {
    let arch = if cfg!(target_arch = "aarch64") {
        "AArch64"
    } else {
        "x86-64"
    };
    let mut found: Vec<(String, PathBuf)> = listed
        .lines()
        .filter_map(|line| {
            let (left, path) = line.split_once(" => ")?;
            let (name, kind) = left.trim().split_once(' ')?;
            let ours = LIBRARIES.iter().any(|l| name.starts_with(l)) && kind.contains(arch);
            ours.then(|| (name.to_owned(), PathBuf::from(path.trim())))
        })
        .collect();
    found.sort();
    found.dedup_by(|a, b| a.0 == b.0);
    found
}

/// `value` with `dir` added at its end, unless it names it already.
pub fn with_dir(value: Option<&str>, dir: &str) -> String {
    match value {
        Some(v) if v.split(':').any(|d| d == dir) => v.to_owned(),
        Some(v) if !v.is_empty() => format!("{v}:{dir}"),
        _ => dir.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drivers_libraries_are_found_by_the_names_programs_load() {
        let listed = "1234 libs found in cache `/etc/ld.so.cache'
\tlibcuda.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcuda.so.1
\tlibcuda.so (libc6,x86-64) => /lib/x86_64-linux-gnu/libcuda.so
\tlibcuda.so.1 (libc6) => /lib/i386-linux-gnu/libcuda.so.1
\tlibnvidia-ml.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libnvidia-ml.so.1
\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6
\tlibnvidia-egl-wayland.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libnvidia-egl-wayland.so.1
";
        let names: Vec<String> = libraries(listed).into_iter().map(|(n, _)| n).collect();
        if cfg!(target_arch = "x86_64") {
            assert_eq!(names, ["libcuda.so", "libcuda.so.1", "libnvidia-ml.so.1"]);
        }
    }

    #[test]
    fn the_driver_directory_is_added_once() {
        assert_eq!(with_dir(None, LIB_DIR), LIB_DIR);
        assert_eq!(
            with_dir(Some("/opt/x"), LIB_DIR),
            format!("/opt/x:{LIB_DIR}")
        );
        let both = format!("/usr/local/nvidia/lib:{LIB_DIR}");
        assert_eq!(with_dir(Some(&both), LIB_DIR), both);
    }
}
