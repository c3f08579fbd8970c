//! The `process` runtime: the workload is a plain `sh -c` of the agent's
//! own user with `CUDA_VISIBLE_DEVICES` set. Nothing fences it: any program
//! may unset that variable, read the agent's files and see other work. For
//! trusted single-tenant nodes only; operators see such nodes marked as not
//! isolated. It still starts from an empty environment and a scratch
//! directory of its own.

use std::path::PathBuf;

use uuid::Uuid;

use super::{Access, Launch, Prepared, Runtime, RuntimeKind};

pub struct Process {
    scratch_dir: PathBuf,
}

impl Process {
    pub fn new(state_dir: &std::path::Path) -> std::io::Result<Self> {
        let scratch_dir = state_dir.join("scratch");
        std::fs::create_dir_all(&scratch_dir)?;
        Ok(Self { scratch_dir })
    }

    fn scratch(&self, id: Uuid) -> PathBuf {
        self.scratch_dir.join(id.to_string())
    }
}

impl Runtime for Process {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Process
    }

    fn offers_ssh(&self) -> bool {
        false
    }

    fn prepare(&self, launch: &Launch<'_>) -> Result<Prepared, String> {
        let scratch = self.scratch(launch.id);
        super::make_scratch(&scratch)?;
        let home = scratch.display().to_string();
        Ok(Prepared {
            argv: super::program_line(&[], launch.command),
            env: super::workload_env(&home, &[], launch.env),
            cwd: launch.working_dir.map_or(scratch, PathBuf::from),
            cgroup_procs: Vec::new(),
            access: Access {
                ssh: None,
                ports: launch.ports.to_vec(),
            },
            fds: Vec::new(),
            network: None,
            inside: None,
            ssh: None,
        })
    }

    fn stop(&self, _id: Uuid) -> bool {
        false
    }

    fn authorize(&self, _id: Uuid, _keys: &[String]) {}

    fn ending(&self, _id: Uuid) -> Option<String> {
        None
    }

    fn clean(&self, id: Uuid) -> bool {
        std::fs::remove_dir_all(self.scratch(id)).ok();
        true
    }
}
