//! A fresh database per test: a SQLite file in a directory of its own, or a
//! PostgreSQL database created for the test and dropped with it (also when
//! the test panics), so a crate's database tests need no server.

use std::path::PathBuf;

use sea_orm::{ConnectionTrait, Database, DatabaseConnection};
use uuid::Uuid;

use crate::{Engine, postgres_admin_url};

pub struct TestDatabase {
    pub url: String,
    /// Holds the SQLite file; the server started on this database keeps its
    /// data here too.
    pub dir: PathBuf,
    postgres_database: Option<String>,
}

impl TestDatabase {
    pub async fn create(engine: Engine) -> Self {
        let dir = std::env::temp_dir().join(format!("gantry-test-{}", Uuid::new_v4().simple()));
        let (url, postgres_database) = match engine {
            Engine::Sqlite => {
                std::fs::create_dir_all(&dir).expect("test directory");
                (
                    format!("sqlite://{}/gantry.db?mode=rwc", dir.display()),
                    None,
                )
            }
            Engine::Postgres => {
                let name = format!("gantry_test_{}", Uuid::new_v4().simple());
                let admin = postgres_admin_url();
                let db = Database::connect(&admin).await.unwrap_or_else(|e| {
                    panic!(
                        "PostgreSQL at {admin} is not reachable ({e}). Start it, point GANTRY_TEST_POSTGRES_URL \
                         at one, or set GANTRY_TEST_POSTGRES=skip to skip this half locally."
                    )
                });
                db.execute_unprepared(&format!("CREATE DATABASE {name}"))
                    .await
                    .expect("create test database");
                db.close().await.ok();
                let base = admin
                    .rsplit_once('/')
                    .map_or(admin.as_str(), |(base, _)| base);
                (format!("{base}/{name}"), Some(name))
            }
        };
        Self {
            url,
            dir,
            postgres_database,
        }
    }

    /// A connection to the database with every migration applied, as the
    /// server would leave it at start.
    pub async fn migrated(&self) -> DatabaseConnection {
        let db = gantry_core::db::connect(&self.url, 5, "gantry-test")
            .await
            .expect("connect to the test database");
        gantry_core::db::migrate(&db).await.expect("migrate");
        db
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.dir).ok();
        if let Some(name) = self.postgres_database.take() {
            // Drop runs outside async; a short-lived runtime on its own thread
            // drops the database even when the test panicked.
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                runtime.block_on(async {
                    if let Ok(db) = Database::connect(&postgres_admin_url()).await {
                        db.execute_unprepared(&format!(
                            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                        ))
                        .await
                        .ok();
                        db.close().await.ok();
                    }
                });
            })
            .join()
            .ok();
        }
    }
}
