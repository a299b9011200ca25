//! The Postgres check of a drill: connect to the scratch database with the connection details
//! CloudNativePG publishes in the `<cluster>-app` Secret (host, port, user, password, dbname), as
//! an application would, and run the check in a read-only transaction. The password is only
//! passed to the connection; no message of this module contains it.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_postgres::NoTls;

/// How to reach the scratch database (from the operator's Secret).
#[derive(Clone)]
pub struct Target {
    /// Server host.
    pub host: String,
    /// Server port.
    pub port: u16,
    /// Role.
    pub user: String,
    /// The role's password (never printed).
    pub password: String,
    /// The application's database.
    pub dbname: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}@{}:{}/{}",
            self.user, self.host, self.port, self.dbname
        )
    }
}

impl Target {
    /// Reads the decoded `data` of a CloudNativePG `-app` Secret; `Err` names the missing key.
    pub fn from_secret(data: &BTreeMap<String, String>) -> Result<Target, String> {
        let key = |k: &str| {
            data.get(k)
                .filter(|v| !v.is_empty())
                .cloned()
                .ok_or_else(|| format!("the Secret has no {k}"))
        };
        let user = key("username").or_else(|_| key("user"))?;
        let port = key("port")?;
        Ok(Target {
            host: key("host")?,
            port: port
                .parse()
                .map_err(|_| format!("the Secret's port {port:?} is not a port number"))?,
            user,
            password: key("password")?,
            dbname: key("dbname")?,
        })
    }
}

/// Why a check did not pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The server answered and the check holds: what was checked.
    Passed(String),
    /// The server answered and the check does not hold (the query failed or returned no row).
    Failed(String),
    /// The server could not be reached yet (it may still be starting): retried until the deadline.
    Unreachable(String),
}

/// Runs the check against `target`, giving up after `within`.
pub async fn run(target: &Target, sql: Option<&str>, within: Duration) -> Outcome {
    match tokio::time::timeout(within, check(target, sql)).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::Unreachable(format!(
            "the check against {target:?} did not answer within {}s",
            within.as_secs()
        )),
    }
}

async fn check(target: &Target, sql: Option<&str>) -> Outcome {
    let mut config = tokio_postgres::Config::new();
    config
        .host(&target.host)
        .port(target.port)
        .user(&target.user)
        .password(&target.password)
        .dbname(&target.dbname)
        .application_name("cozy-backups-restore-drill")
        .connect_timeout(Duration::from_secs(10));
    let (mut client, connection) = match config.connect(NoTls).await {
        Ok(c) => c,
        Err(e) => {
            // A refused login is an answer, not a server still starting.
            let refused = e.as_db_error().is_some();
            let message = format!("could not connect to {target:?}: {}", describe(&e));
            return if refused {
                Outcome::Failed(message)
            } else {
                Outcome::Unreachable(message)
            };
        }
    };
    let conn = tokio::spawn(async move {
        let _ = connection.await;
    });
    let outcome = async {
        let tx = client
            .build_transaction()
            .read_only(true)
            .start()
            .await
            .map_err(|e| format!("could not start a read-only transaction: {}", describe(&e)))?;
        let listed = tx
            .query(
                "SELECT 1 FROM pg_database WHERE datname = $1",
                &[&target.dbname],
            )
            .await
            .map_err(|e| format!("reading pg_database failed: {}", describe(&e)))?;
        if listed.is_empty() {
            return Err(format!("pg_database does not list {:?}", target.dbname));
        }
        let mut what = format!(
            "the server accepts connections and pg_database lists {:?}",
            target.dbname
        );
        if let Some(sql) = sql {
            let rows = tx
                .query(sql, &[])
                .await
                .map_err(|e| format!("the check query {sql:?} failed: {}", describe(&e)))?;
            if rows.is_empty() {
                return Err(format!("the check query {sql:?} returned no row"));
            }
            what = format!(
                "{what}; the check query {sql:?} returned {} row(s)",
                rows.len()
            );
        }
        let _ = tx.rollback().await;
        Ok(what)
    }
    .await;
    drop(client);
    let _ = conn.await;
    match outcome {
        Ok(what) => Outcome::Passed(what),
        Err(why) => Outcome::Failed(why),
    }
}

/// The server's own words for a database error, else the client's.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => e.to_string(),
    }
}
