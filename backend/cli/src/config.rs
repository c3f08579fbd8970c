//! Where the client keeps its sign-in: one JSON file in the user's config
//! directory, readable by its owner only, replaced atomically, and locked
//! while a session is refreshed so that two commands running at once do
//! not both spend the same single-use refresh token (the server would take
//! that for a stolen copy and end the sign-in).

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{CliError, CliResult};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    /// The server's base URL, such as `https://gpu.example.com`.
    pub server: String,
    pub credential: Credential,
    /// The organization commands act in unless `--org` says otherwise.
    pub org_id: Option<Uuid>,
    pub org_name: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Credential {
    ApiKey {
        secret: String,
    },
    /// A signed-in user: a short-lived access token and the single-use
    /// refresh token that gets the next one.
    Session {
        email: String,
        access_token: String,
        expires_at: DateTime<Utc>,
        refresh_token: String,
    },
}

/// A token this close to expiring is refreshed before it is used.
const REFRESH_MARGIN: TimeDelta = TimeDelta::seconds(30);

impl Credential {
    /// A session whose access token is about to run out.
    pub fn expiring(&self) -> bool {
        match self {
            Self::ApiKey { .. } => false,
            Self::Session { expires_at, .. } => *expires_at - REFRESH_MARGIN <= Utc::now(),
        }
    }

    pub fn bearer(&self) -> &str {
        match self {
            Self::ApiKey { secret } => secret,
            Self::Session { access_token, .. } => access_token,
        }
    }
}

/// The config file: `--config`/`GANTRY_CONFIG`, else `gantry/config.json`
/// in the user's config directory.
pub fn default_path() -> CliResult<PathBuf> {
    dirs::config_dir()
        .map(|dir| dir.join("gantry").join("config.json"))
        .ok_or_else(|| {
            CliError::Local("no config directory: set HOME, or pass --config FILE".into())
        })
}

pub fn load(path: &Path) -> CliResult<Option<Config>> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            CliError::Local(format!(
                "{} is not a config this client wrote ({e}): run `gantry-cli login` again",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CliError::Local(format!("reading {}: {e}", path.display()))),
    }
}

/// The directory `path` goes in, made owner-only when this makes it.
fn make_directory(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.exists() => {
            fs::create_dir_all(dir)?;
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        }
        _ => Ok(()),
    }
}

/// Writes `config` to a new file beside `path`, owner-only from the start,
/// and renames it over `path`.
pub fn save(path: &Path, config: &Config) -> CliResult<()> {
    let local = |e: std::io::Error| CliError::Local(format!("writing {}: {e}", path.display()));
    make_directory(path).map_err(local)?;
    let temporary = path.with_extension(format!("tmp-{}", std::process::id()));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)
        .map_err(local)?;
    let bytes = serde_json::to_vec_pretty(config)
        .map_err(|e| CliError::Local(format!("encoding the config: {e}")))?;
    let written = file
        .write_all(&bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| fs::rename(&temporary, path));
    if let Err(e) = written {
        fs::remove_file(&temporary).ok();
        return Err(local(e));
    }
    Ok(())
}

pub fn remove(path: &Path) -> CliResult<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CliError::Local(format!("removing {}: {e}", path.display()))),
    }
}

/// An exclusive lock on `path`'s lock file, held until dropped.
pub struct Lock(File);

impl Drop for Lock {
    fn drop(&mut self) {
        self.0.unlock().ok();
    }
}

pub fn lock(path: &Path) -> CliResult<Lock> {
    let lock_path = path.with_extension("lock");
    let file = make_directory(path)
        .and_then(|()| {
            OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .open(&lock_path)
        })
        .and_then(|file| file.lock().map(|()| file))
        .map_err(|e| CliError::Local(format!("locking {}: {e}", lock_path.display())))?;
    Ok(Lock(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_its_owners_alone_and_reads_back() {
        let dir = std::env::temp_dir().join(format!("gantry-cli-config-{}", Uuid::now_v7()));
        let path = dir.join("nested").join("config.json");
        let config = Config {
            server: "https://gpu.example.com".into(),
            credential: Credential::ApiKey {
                secret: "gk_secret".into(),
            },
            org_id: Some(Uuid::now_v7()),
            org_name: Some("Acme".into()),
        };
        save(&path, &config).expect("save");
        save(&path, &config).expect("save over it");
        let mode = fs::metadata(&path).expect("metadata").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dir_mode = fs::metadata(path.parent().expect("dir"))
            .expect("metadata")
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        let back = load(&path).expect("load").expect("present");
        assert_eq!(back.credential.bearer(), "gk_secret");
        assert_eq!(back.org_name.as_deref(), Some("Acme"));
        remove(&path).expect("remove");
        assert!(load(&path).expect("load").is_none());
        fs::remove_dir_all(dir).ok();
    }
}
