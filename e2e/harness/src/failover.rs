//! Replicas of one daemon on the real `lease-server` binary, for failover tests.
//!
//! ```text
//!  Failover::start(h, spec, …) ──► lease-server (--max-ttl = TTL, TLS on 127.0.0.1:<port>,
//!      │                           --authorize <the component's account>=<component>/)
//!      │                           a token of ServiceAccount <component> (in the test's namespace)
//!      │                           for the lease audience, from TokenRequest
//!      │                           replica-1 … replica-N (--lease-endpoint https://…,
//!      │                           --lease-ca-file, --lease-token-file, --identity, --lease-ttl)
//!      ├─ leader(h)                the one replica whose `cozy_backups_<component>_leader` is 1
//!      ├─ takeover(h, from, t0)    polls the others every 10 ms: who leads next, and when
//!      ├─ LeaderMonitor            a thread sampling every replica's gauge: the most replicas
//!      │                           that ever led at the same instant
//!      └─ restart_lease_server(h)  kill -9 and start again on the same address
//! ```
//!
//! Leadership is read from each replica's `/metrics` (the gauge the runtime keeps equal to the
//! elector's state), so tests observe what an operator would. The lease path is the production
//! one: TLS, a ServiceAccount token reviewed with TokenReview, authorization by prefix
//! ([`Failover::start_insecure`] keeps the plaintext `--insecure` server for a test that needs it).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::{Admin, DaemonSpec, Error, Harness, SecureLeaseServer};

/// The harness name of the lease server a [`Failover`] starts.
pub const LEASE_SERVER: &str = "lease-server";

/// How often leadership is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(10);

/// After SIGTERM, a standby must lead within this (the leader releases its lease before exiting
/// and the server pushes the release to the standbys).
pub const GRACEFUL_TAKEOVER: Duration = Duration::from_secs(1);

/// Added to every measured bound: the 10 ms sampling, a `/metrics` round trip per replica and
/// the server's 50 ms expiry tick, on a loaded two-core machine.
pub const MARGIN: Duration = Duration::from_millis(300);

/// N replicas of one daemon contending on one lease server.
#[derive(Debug, Clone)]
pub struct Failover {
    /// The daemon's component name (the leadership gauge is `cozy_backups_<component>_leader`).
    pub component: String,
    /// Harness names of the replicas, which are also their lease identities.
    pub replicas: Vec<String>,
    /// The lease server's gRPC address.
    pub grpc: String,
    /// The `--lease-ttl` every replica uses (also the server's `--max-ttl`, so its quiet period
    /// after a restart is one TTL).
    pub ttl: Duration,
    /// The secured server's endpoint and certificates, and the replicas' token file (`None` for
    /// [`Failover::start_insecure`]).
    pub secure: Option<(SecureLeaseServer, std::path::PathBuf)>,
}

impl Failover {
    /// Starts a lease server (keeping its epoch in `namespace`, which must exist) serving TLS and
    /// authenticating callers, and `n` replicas built by `spec(name)` with the lease flags added,
    /// and waits until each is ready. The replicas authenticate as the ServiceAccount `component`
    /// in `namespace` (created if missing), which the server authorizes for `<component>/`.
    /// Replica names are `<component>-1` … `<component>-n`.
    pub async fn start(
        h: &mut Harness,
        component: &str,
        namespace: &str,
        n: usize,
        ttl: Duration,
        spec: impl Fn(&str) -> DaemonSpec,
    ) -> Result<Self, Error> {
        Self::start_with(h, component, namespace, n, ttl, true, spec).await
    }

    /// As [`Failover::start`], on a plaintext lease server without authentication
    /// (`--insecure`, `http://`).
    pub async fn start_insecure(
        h: &mut Harness,
        component: &str,
        namespace: &str,
        n: usize,
        ttl: Duration,
        spec: impl Fn(&str) -> DaemonSpec,
    ) -> Result<Self, Error> {
        Self::start_with(h, component, namespace, n, ttl, false, spec).await
    }

    async fn start_with(
        h: &mut Harness,
        component: &str,
        namespace: &str,
        n: usize,
        ttl: Duration,
        secure: bool,
        spec: impl Fn(&str) -> DaemonSpec,
    ) -> Result<Self, Error> {
        let ttl_arg = format!("{}ms", ttl.as_millis());
        let server = DaemonSpec::new(LEASE_SERVER, crate::locate_binary("lease-server")?).args([
            "--namespace",
            namespace,
            "--max-ttl",
            &ttl_arg,
        ]);
        let (grpc, lease_args, secure) = if secure {
            let lease = h
                .spawn_component_lease_server(server, component, namespace, crate::DEADLINE)
                .await?;
            let args = lease.args();
            (
                lease.server.addr.clone(),
                args,
                Some((lease.server, lease.token_file)),
            )
        } else {
            let grpc = h.spawn_lease_server(server, crate::DEADLINE).await?;
            let args = vec!["--lease-endpoint".to_owned(), grpc.clone()];
            (grpc, args, None)
        };
        let mut replicas = Vec::new();
        for i in 1..=n {
            let name = format!("{component}-{i}");
            let spec = spec(&name).args(lease_args.iter().cloned()).args([
                "--identity",
                &name,
                "--lease-ttl",
                &ttl_arg,
            ]);
            h.spawn(spec)?;
            replicas.push(name);
        }
        for name in &replicas {
            h.daemon(name)?.wait_ready(crate::DEADLINE).await?;
        }
        let f = Self {
            component: component.into(),
            replicas,
            grpc,
            ttl,
            secure,
        };
        if f.secure.is_some() {
            // Ready only says the server answered; this says it authenticated and authorized them.
            let deadline = Instant::now() + crate::DEADLINE;
            while f.check_authenticated(h)?.is_err() && Instant::now() < deadline {
                tokio::time::sleep(SAMPLE_EVERY).await;
            }
            f.check_authenticated(h)?.map_err(Error::Timeout)?;
        }
        Ok(f)
    }

    /// On a secured server: `Ok` when the server has authenticated a caller by TokenReview and
    /// refused nobody (no `UNAUTHENTICATED`, `PERMISSION_DENIED` or `UNAVAILABLE` for a review),
    /// else what its metrics show.
    pub fn check_authenticated(&self, h: &mut Harness) -> Result<Result<(), String>, Error> {
        let admin = Admin::new(h.daemon(LEASE_SERVER)?.admin_addr.clone());
        let metrics = admin.metrics();
        let reviewed = metrics.value(
            "cozy_backups_lease_server_token_reviews_total",
            &[("result", "authenticated")],
        );
        let refused = metrics.sum("cozy_backups_lease_server_auth_refusals_total", &[]);
        Ok(if reviewed >= 1.0 && refused == 0.0 {
            Ok(())
        } else {
            Err(format!(
                "the lease server to authenticate the replicas and refuse none \
                 ({reviewed} authenticated reviews, {refused} refusals)"
            ))
        })
    }

    /// The leadership gauge's name.
    pub fn gauge(&self) -> String {
        format!("cozy_backups_{}_leader", self.component.replace('-', "_"))
    }

    /// The admin servers of the replicas, by name (a replica restarted since gets a new one:
    /// call this again).
    pub fn admins(&self, h: &mut Harness) -> Result<Vec<(String, Admin)>, Error> {
        self.replicas
            .iter()
            .map(|name| {
                let d = h.daemon(name)?;
                Ok((name.clone(), Admin::new(d.admin_addr.clone())))
            })
            .collect()
    }

    /// The replicas whose leadership gauge reads 1 right now.
    pub fn leaders(&self, h: &mut Harness) -> Result<Vec<String>, Error> {
        let gauge = self.gauge();
        Ok(self
            .admins(h)?
            .into_iter()
            .filter(|(_, a)| leads(a, &gauge))
            .map(|(name, _)| name)
            .collect())
    }

    /// Waits (bounded) until exactly one replica leads, and names it.
    pub async fn leader(&self, h: &mut Harness) -> Result<String, Error> {
        let deadline = Instant::now() + crate::DEADLINE;
        loop {
            let leaders = self.leaders(h)?;
            if let [one] = leaders.as_slice() {
                return Ok(one.clone());
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout(format!(
                    "exactly one leader among {:?} (leading: {leaders:?})",
                    self.replicas
                )));
            }
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
    }

    /// Waits (at most `within` after `since`) until a replica other than `from` leads; answers it
    /// and the time from `since` to the first sample that showed it leading.
    pub async fn takeover(
        &self,
        h: &mut Harness,
        from: &str,
        since: Instant,
        within: Duration,
    ) -> Result<(String, Duration), Error> {
        let gauge = self.gauge();
        let others: Vec<(String, Admin)> = self
            .admins(h)?
            .into_iter()
            .filter(|(name, _)| name != from)
            .collect();
        loop {
            let found = tokio::task::spawn_blocking({
                let others = others.clone();
                let gauge = gauge.clone();
                move || {
                    others
                        .iter()
                        .find(|(_, a)| leads(a, &gauge))
                        .map(|(n, _)| n.clone())
                }
            })
            .await
            .ok()
            .flatten();
            let elapsed = since.elapsed();
            if let Some(name) = found {
                return Ok((name, elapsed));
            }
            if elapsed > within {
                return Err(Error::Timeout(format!(
                    "a replica other than {from} to lead within {within:?}"
                )));
            }
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
    }

    /// The replicas whose gauge `metric` (e.g. a daemon's jobs-in-flight gauge) reads at least 1.
    pub fn reporting(&self, h: &mut Harness, metric: &str) -> Result<Vec<String>, Error> {
        Ok(self
            .admins(h)?
            .into_iter()
            .filter(|(_, a)| a.metrics().get(metric, &[]).is_some_and(|v| v >= 1.0))
            .map(|(name, _)| name)
            .collect())
    }

    /// Starts sampling every replica's leadership in a thread, until the monitor is dropped or
    /// [`LeaderMonitor::finish`]ed.
    pub fn monitor(&self, h: &mut Harness) -> Result<LeaderMonitor, Error> {
        let admins = self.admins(h)?;
        Ok(LeaderMonitor::start(admins, self.gauge()))
    }

    /// `kill -9` the current leader and wait for a standby to lead: asserts it happens within one
    /// TTL (plus [`MARGIN`]) of the kill. Answers the new leader and the measured time.
    pub async fn kill_leader(
        &self,
        h: &mut Harness,
        leader: &str,
    ) -> Result<(String, Duration), Error> {
        let killed = Instant::now();
        h.kill(leader).await?;
        let (next, took) = self.takeover(h, leader, killed, self.ttl + MARGIN).await?;
        println!(
            "failover: kill -9 of {leader} → {next} leads after {} ms (TTL {} ms)",
            took.as_millis(),
            self.ttl.as_millis()
        );
        Ok((next, took))
    }

    /// SIGTERM the current leader: asserts it exits successfully after logging that it released
    /// its leases, and that a standby leads within [`GRACEFUL_TAKEOVER`] (plus [`MARGIN`]) of the
    /// signal. Answers the new leader and the measured time.
    pub async fn terminate_leader(
        &self,
        h: &mut Harness,
        leader: &str,
    ) -> Result<(String, Duration), Error> {
        let bound = GRACEFUL_TAKEOVER + MARGIN;
        let signalled = Instant::now();
        h.daemon(leader)?.send_sigterm()?;
        let (next, took) = self.takeover(h, leader, signalled, bound).await?;
        let exit = h.daemon(leader)?.wait_exit(crate::DEADLINE).await?;
        if !exit.success() {
            return Err(Error::Timeout(format!(
                "{leader} to exit successfully after SIGTERM (it exited with {exit})"
            )));
        }
        let log = h.daemon(leader)?.log();
        if !log.contains("released every lease of this replica") {
            return Err(Error::Timeout(format!(
                "{leader} to log that it released its leases before exiting"
            )));
        }
        println!(
            "failover: SIGTERM of {leader} → {next} leads after {} ms (TTL {} ms)",
            took.as_millis(),
            self.ttl.as_millis()
        );
        Ok((next, took))
    }

    /// `kill -9` the lease server and start it again on the same address (waits for it to be
    /// ready; it then grants nothing new for one TTL, its quiet period). Answers when it was
    /// killed.
    pub async fn restart_lease_server(&self, h: &mut Harness) -> Result<Instant, Error> {
        let killed = Instant::now();
        h.restart(LEASE_SERVER, crate::DEADLINE).await?;
        Ok(killed)
    }
}

impl Failover {
    /// Waits for exactly one replica to report `metric` (e.g. its jobs-in-flight gauge) at 1 or
    /// more, and answers it: the holder of the only work-leased job of a test.
    pub async fn single_reporting(&self, h: &mut Harness, metric: &str) -> Result<String, Error> {
        let deadline = Instant::now() + crate::DEADLINE;
        loop {
            let now = self.reporting(h, metric)?;
            if let [one] = now.as_slice() {
                return Ok(one.clone());
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout(format!(
                    "a single replica reporting {metric} (now: {now:?})"
                )));
            }
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
    }
}

/// A job driven under a work lease, whose holder records its fencing token in an annotation of
/// the job: a new holder's fence is a higher token.
#[derive(Debug, Clone)]
pub struct Fenced<K: kube::Resource> {
    api: kube::Api<K>,
    name: String,
    annotation: &'static str,
}

impl<K> Fenced<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    /// Job `name` read through `api`, fenced under `annotation`.
    pub fn new(api: kube::Api<K>, name: &str, annotation: &'static str) -> Self {
        Self {
            api,
            name: name.into(),
            annotation,
        }
    }

    /// The token on the job now, if any (and if it reads as a number).
    pub async fn token(&self) -> Option<u64> {
        let job = self.api.get(&self.name).await.ok()?;
        job.meta()
            .annotations
            .as_ref()?
            .get(self.annotation)?
            .parse()
            .ok()
    }

    /// Waits for the job's first fence; answers its token.
    pub async fn fenced(&self) -> u64 {
        crate::eventually(&format!("job {} fenced by its holder", self.name), || {
            self.token()
        })
        .await
    }

    /// `kill -9` the job's `holder` (fenced with `token`) and wait for another replica's fence:
    /// within `ttl` plus [`MARGIN`]. Answers the time it took.
    pub async fn kill_holder(
        &self,
        h: &mut Harness,
        holder: &str,
        token: u64,
        ttl: Duration,
    ) -> Result<Duration, Error> {
        let killed = Instant::now();
        h.kill(holder).await?;
        let took = self.refenced(token, killed, ttl + MARGIN).await;
        println!(
            "failover: kill -9 of {holder} → job {} re-fenced after {} ms (TTL {} ms)",
            self.name,
            took.as_millis(),
            ttl.as_millis()
        );
        Ok(took)
    }

    /// SIGTERM the job's `holder` (fenced with `token`): another replica fences it within
    /// [`GRACEFUL_TAKEOVER`] plus [`MARGIN`], and the holder exits successfully. Answers the time
    /// the takeover took.
    pub async fn terminate_holder(
        &self,
        h: &mut Harness,
        holder: &str,
        token: u64,
    ) -> Result<Duration, Error> {
        let signalled = Instant::now();
        h.daemon(holder)?.send_sigterm()?;
        let took = self
            .refenced(token, signalled, GRACEFUL_TAKEOVER + MARGIN)
            .await;
        println!(
            "failover: SIGTERM of {holder} → job {} re-fenced after {} ms",
            self.name,
            took.as_millis()
        );
        let exit = h.daemon(holder)?.wait_exit(crate::DEADLINE).await?;
        if !exit.success() {
            return Err(Error::Timeout(format!(
                "{holder} to exit successfully after SIGTERM (it exited with {exit})"
            )));
        }
        Ok(took)
    }

    /// Polls the job every 10 ms until a token above `above` is recorded; answers the time since
    /// `since`, and panics if that takes longer than `within`.
    pub async fn refenced(&self, above: u64, since: Instant, within: Duration) -> Duration {
        loop {
            if self.token().await.is_some_and(|t| t > above) {
                return since.elapsed();
            }
            assert!(
                since.elapsed() < within,
                "job {} was not taken over within {within:?}",
                self.name
            );
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
    }
}

fn leads(admin: &Admin, gauge: &str) -> bool {
    admin.metrics().get(gauge, &[]) == Some(1.0)
}

/// Samples which replicas lead, every 10 ms, in a thread.
#[derive(Debug)]
pub struct LeaderMonitor {
    started: Instant,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Observed>>,
}

/// What a [`LeaderMonitor`] saw.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// When sampling started (the times below count from it).
    pub started: Option<Instant>,
    /// How many samples were taken (each reads every replica once).
    pub samples: usize,
    /// The most replicas seen leading in one sample.
    pub max_leaders: usize,
    /// The samples in which two or more replicas led: (time since start, their names).
    pub overlaps: Vec<(Duration, Vec<String>)>,
    /// Every change of the set of leaders: (time since start, the leaders after it).
    pub changes: Vec<(Duration, Vec<String>)>,
}

impl LeaderMonitor {
    fn start(admins: Vec<(String, Admin)>, gauge: String) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let mut seen = Observed {
                    started: Some(started),
                    ..Observed::default()
                };
                let mut last: Option<Vec<String>> = None;
                while !stop.load(Ordering::Relaxed) {
                    let leaders: Vec<String> = admins
                        .iter()
                        .filter(|(_, a)| leads(a, &gauge))
                        .map(|(n, _)| n.clone())
                        .collect();
                    let at = started.elapsed();
                    seen.samples += 1;
                    seen.max_leaders = seen.max_leaders.max(leaders.len());
                    if leaders.len() > 1 {
                        seen.overlaps.push((at, leaders.clone()));
                    }
                    if last.as_ref() != Some(&leaders) {
                        seen.changes.push((at, leaders.clone()));
                        last = Some(leaders);
                    }
                    std::thread::sleep(SAMPLE_EVERY);
                }
                seen
            }
        });
        Self {
            started,
            stop,
            thread: Some(thread),
        }
    }

    /// When sampling started.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Stops sampling and answers what was seen.
    pub fn finish(mut self) -> Observed {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Observed {
    /// The lease-server invariants across a restart of the server killed at `killed`: never two
    /// leaders in one sample, and no replica other than `leader` (the one leading before) began
    /// leading before the server's quiet period of `quiet` could have ended (`killed + quiet`;
    /// the new process started after `killed`). Answers what went wrong.
    pub fn check_restart(
        &self,
        leader: &str,
        killed: Instant,
        quiet: Duration,
    ) -> Result<(), String> {
        if let Some((at, names)) = self.overlaps.first() {
            return Err(format!(
                "{} samples showed two leaders, first at {at:?}: {names:?} (changes: {:?})",
                self.overlaps.len(),
                self.changes
            ));
        }
        let started = self.started.ok_or("the monitor took no sample")?;
        let not_before = killed.saturating_duration_since(started) + quiet;
        let mut previous: Vec<String> = vec![leader.to_owned()];
        for (at, leaders) in &self.changes {
            let new: Vec<&String> = leaders.iter().filter(|l| !previous.contains(l)).collect();
            if !new.is_empty()
                && *at >= killed.saturating_duration_since(started)
                && *at < not_before
            {
                return Err(format!(
                    "{new:?} began leading at {at:?}, inside the quiet period that ends at \
                     {not_before:?} (changes: {:?})",
                    self.changes
                ));
            }
            previous = leaders.clone();
        }
        Ok(())
    }
}

impl Drop for LeaderMonitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
