//! The lease server's state machine: pure, synchronous, over an injected clock ([`Now`]).
//!
//! ```text
//!  Acquire ─► free? ──yes──► quiet period? ──no──► grant (new token) ─► Event::Acquired
//!               │ no                 └─yes─► refuse, retry after the quiet period
//!               └─ same holder? ──yes──► extend (same token)   no ──► refuse, retry after its expiry
//!  Renew   ─► held with this holder+token? ──► extend by the TTL from now
//!               └─ free + token of an earlier epoch + valid unexpired proof ──► restore (same token)
//!  Release ─► held with this holder+token? ──► remove ─► Event::Released
//!  expire_due(now) ─► every lease whose expiry passed ─► Event::Expired
//! ```
//!
//! Invariants:
//! * **Fencing tokens strictly increase per name, also across restarts.** A token is
//!   `epoch << 40 | counter`: the epoch is persisted and incremented by every server start (the
//!   caller loads it, see [`Epoch`]), and the counter increases with every grant of this process.
//!   A restored lease keeps its earlier-epoch token, which is lower than every token of this epoch.
//! * **At most one holder per name at any instant**, on the server's monotonic clock.
//! * **A grant belongs to an owner.** With authentication the server passes the caller's
//!   authenticated identity (`*_as`); a lease is the caller's own only when owner *and* holder
//!   match, so another identity naming the same holder is refused (its acquisition is answered
//!   "held by another", its renewal or release [`StateError::ForeignOwner`]) and a restart proof
//!   binds the owner as well. Without authentication every owner is empty.
//! * **Restart safety.** For one maximum TTL after start the table grants nothing new (it cannot
//!   know who still believes it holds a lease); the only leases that come back are those whose
//!   holder renews with a token from an earlier epoch *and* the proof the earlier process handed
//!   out with that grant: an HMAC over (name, holder, token, wall-clock expiry) under the key kept
//!   with the epoch. A valid proof shows the earlier process granted exactly that lease until that
//!   expiry, so no other grant of the name can have existed since; an expired proof is refused.
//!   After the quiet period every earlier-epoch proof has expired anyway (clocks permitting), so
//!   the rule needs no time limit of its own.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Bits of a token that count grants within one epoch.
pub const COUNTER_BITS: u32 = 40;
/// The largest epoch a token can carry.
pub const MAX_EPOCH: u64 = (1 << (64 - COUNTER_BITS)) - 1;
const COUNTER_MASK: u64 = (1 << COUNTER_BITS) - 1;

/// The epoch of a token.
pub fn token_epoch(token: u64) -> u64 {
    token >> COUNTER_BITS
}

/// The time source of the lease service and its authenticator (the real clock in production, a
/// stepped one in tests).
pub type Clock = std::sync::Arc<dyn Fn() -> Now + Send + Sync>;

/// A point in time as the state machine sees it: the server's monotonic clock, plus its wall clock
/// (used only for restart proofs, which must be checked by a later process).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// Monotonic time: expiry and the quiet period are measured on it.
    pub mono: Instant,
    /// Wall-clock Unix milliseconds.
    pub unix_ms: i64,
}

impl Now {
    /// The current time of this process.
    pub fn system() -> Self {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Self {
            mono: Instant::now(),
            unix_ms,
        }
    }

    /// This time plus `d` on both clocks (tests step time with it).
    pub fn after(self, d: Duration) -> Self {
        Self {
            mono: self.mono + d,
            unix_ms: self.unix_ms + millis(d) as i64,
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What a server start loaded from (and already persisted to) its epoch object.
#[derive(Clone, PartialEq, Eq)]
pub struct Epoch {
    /// This process's epoch: one more than the previous process's, at least 1.
    pub number: u64,
    /// The key of restart proofs; the same for every epoch of one installation.
    pub proof_key: Vec<u8>,
}

impl std::fmt::Debug for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The proof key never reaches a log line.
        f.debug_struct("Epoch")
            .field("number", &self.number)
            .finish_non_exhaustive()
    }
}

/// Limits of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest TTL a client may ask for; also the length of the post-restart quiet period.
    pub max_ttl: Duration,
}

/// One current grant, as answered to clients and carried by events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Lease name.
    pub name: String,
    /// Holder identity.
    pub holder: String,
    /// TTL of the grant.
    pub ttl: Duration,
    /// Time left until the server expires it, at the time of the answer.
    pub remaining: Duration,
    /// Wall-clock expiry, Unix milliseconds.
    pub expires_unix_ms: i64,
    /// Fencing token.
    pub token: u64,
}

/// A grant handed to its holder, with the proof that restores it after a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The grant.
    pub grant: Grant,
    /// Restart proof: wall-clock expiry (8 bytes, big endian) followed by the HMAC-SHA256.
    pub proof: Vec<u8>,
}

/// The answer to an acquisition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// The caller holds the lease (newly granted, or already its own and now extended).
    Granted(Held),
    /// Someone else holds it; try again after its expiry at the earliest.
    HeldByOther {
        /// The current grant.
        current: Grant,
    },
    /// The server restarted less than one maximum TTL ago and grants nothing new yet.
    QuietPeriod {
        /// Time until the quiet period ends.
        retry_after: Duration,
    },
}

/// Why the renewal of a previous-epoch token was or was not a restore; used for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RenewKind {
    /// An ordinary renewal of a current grant.
    Extended,
    /// A lease of an earlier epoch came back with a valid proof.
    Restored,
}

/// A change other clients may want to hear about at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Granted, or restored after a restart.
    Acquired(Grant),
    /// Released by its holder.
    Released(Grant),
    /// Expired without renewal.
    Expired(Grant),
}

impl Event {
    /// The grant the event is about.
    pub fn grant(&self) -> &Grant {
        match self {
            Event::Acquired(g) | Event::Released(g) | Event::Expired(g) => g,
        }
    }
}

/// Refusals of the table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The request is malformed (empty name or holder, a TTL out of range).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The lease is not held: it expired, was released or never existed.
    #[error("lease {name} is not held (expired, released or never granted)")]
    NotHeld {
        /// Lease name.
        name: String,
    },
    /// The holder or token does not match the current grant, or an earlier-epoch token came without
    /// a valid, unexpired proof: the caller lost the lease.
    #[error("lease {name}: token {token} of {holder} is stale")]
    StaleToken {
        /// Lease name.
        name: String,
        /// The caller.
        holder: String,
        /// The token presented.
        token: u64,
    },
    /// Every token of this epoch has been used; restart the server to move to the next epoch.
    #[error("the tokens of epoch {0} are exhausted; restart the lease server")]
    TokensExhausted(u64),
    /// The lease was granted to another authenticated identity: whatever holder name and token
    /// the caller presents, it may not renew or release it.
    #[error("lease {name} is held by another authenticated identity")]
    ForeignOwner {
        /// Lease name.
        name: String,
    },
}

#[derive(Clone, Debug)]
struct Entry {
    /// The authenticated identity that was granted the lease (empty without authentication).
    owner: String,
    holder: String,
    token: u64,
    ttl: Duration,
    expires: Instant,
    expires_unix_ms: i64,
}

/// Every lease of one server process.
pub struct LeaseTable {
    epoch: u64,
    proof_key: Vec<u8>,
    limits: Limits,
    started: Instant,
    counter: u64,
    leases: BTreeMap<String, Entry>,
    /// `(expiry, name)` of every lease, so expiring is O(log n) per lease rather than a scan.
    expiries: BTreeSet<(Instant, String)>,
}

impl std::fmt::Debug for LeaseTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseTable")
            .field("epoch", &self.epoch)
            .field("leases", &self.leases.len())
            .finish_non_exhaustive()
    }
}

impl LeaseTable {
    /// A table for a process that started at `started` with the persisted `epoch`.
    pub fn new(epoch: Epoch, limits: Limits, started: Instant) -> Self {
        Self {
            epoch: epoch.number.min(MAX_EPOCH),
            proof_key: epoch.proof_key,
            limits,
            started,
            counter: 0,
            leases: BTreeMap::new(),
            expiries: BTreeSet::new(),
        }
    }

    /// This process's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Number of leases held (including ones past expiry that `expire_due` has not removed yet).
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    /// True when no lease is held.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// Time left in the post-restart quiet period, if it has not ended.
    pub fn quiet_remaining(&self, now: Now) -> Option<Duration> {
        let end = self.started + self.limits.max_ttl;
        (now.mono < end).then(|| end - now.mono)
    }

    /// Removes every lease whose expiry passed.
    pub fn expire_due(&mut self, now: Now) -> Vec<Event> {
        let mut events = Vec::new();
        while let Some((expires, _)) = self.expiries.first()
            && *expires <= now.mono
        {
            let (_, name) = self.expiries.pop_first().expect("checked above");
            if let Some(entry) = self.leases.remove(&name) {
                events.push(Event::Expired(grant(&name, &entry, now)));
            }
        }
        events
    }

    /// Acquires `name` for `holder` without an authenticated owner (a server without
    /// authentication); see [`LeaseTable::acquire_as`].
    pub fn acquire(
        &mut self,
        name: &str,
        holder: &str,
        ttl: Duration,
        now: Now,
    ) -> Result<(Acquired, Vec<Event>), StateError> {
        self.acquire_as("", name, holder, ttl, now)
    }

    /// Acquires `name` for `holder`, on behalf of the authenticated identity `owner` (see
    /// [`Acquired`]). A lease is the caller's own only when both the owner and the holder match:
    /// a caller naming another identity's holder is answered [`Acquired::HeldByOther`]. Events:
    /// the expiries it processed first and the grant, if any.
    pub fn acquire_as(
        &mut self,
        owner: &str,
        name: &str,
        holder: &str,
        ttl: Duration,
        now: Now,
    ) -> Result<(Acquired, Vec<Event>), StateError> {
        self.validate(name, holder, Some(ttl))?;
        let mut events = self.expire_due(now);
        if let Some(entry) = self.leases.get_mut(name) {
            if entry.holder == holder && entry.owner == owner {
                // The same identity asking again (typically a retry whose answer was lost): it
                // keeps its token and gets a fresh expiry, exactly like a renewal.
                extend(&mut self.expiries, name, entry, ttl, now);
                let held = self.held(name, now);
                return Ok((Acquired::Granted(held), events));
            }
            let current = grant(name, entry, now);
            return Ok((Acquired::HeldByOther { current }, events));
        }
        if let Some(retry_after) = self.quiet_remaining(now) {
            return Ok((Acquired::QuietPeriod { retry_after }, events));
        }
        if self.counter >= COUNTER_MASK {
            return Err(StateError::TokensExhausted(self.epoch));
        }
        self.counter += 1;
        let token = (self.epoch << COUNTER_BITS) | self.counter;
        let mut entry = Entry {
            owner: owner.into(),
            holder: holder.into(),
            token,
            ttl,
            expires: now.mono,
            expires_unix_ms: now.unix_ms,
        };
        extend(&mut self.expiries, name, &mut entry, ttl, now);
        self.leases.insert(name.into(), entry);
        let held = self.held(name, now);
        events.push(Event::Acquired(held.grant.clone()));
        Ok((Acquired::Granted(held), events))
    }

    /// Renews `name` without an authenticated owner; see [`LeaseTable::renew_as`].
    pub fn renew(
        &mut self,
        name: &str,
        holder: &str,
        token: u64,
        ttl: Duration,
        proof: &[u8],
        now: Now,
    ) -> Result<(Held, RenewKind, Vec<Event>), StateError> {
        self.renew_as("", name, holder, token, ttl, proof, now)
    }

    /// Renews `name` on behalf of `owner`: extends a current grant of that owner, or restores an
    /// earlier epoch's grant that comes with a valid, unexpired proof (the proof binds the owner
    /// too, so another identity cannot restore it).
    #[allow(clippy::too_many_arguments)]
    pub fn renew_as(
        &mut self,
        owner: &str,
        name: &str,
        holder: &str,
        token: u64,
        ttl: Duration,
        proof: &[u8],
        now: Now,
    ) -> Result<(Held, RenewKind, Vec<Event>), StateError> {
        self.validate(name, holder, Some(ttl))?;
        let mut events = self.expire_due(now);
        let stale = || StateError::StaleToken {
            name: name.into(),
            holder: holder.into(),
            token,
        };
        if let Some(entry) = self.leases.get_mut(name) {
            if entry.owner != owner {
                return Err(StateError::ForeignOwner { name: name.into() });
            }
            if entry.holder != holder || entry.token != token {
                return Err(stale());
            }
            extend(&mut self.expiries, name, entry, ttl, now);
            return Ok((self.held(name, now), RenewKind::Extended, events));
        }
        if token_epoch(token) >= self.epoch {
            // A grant of this process that expired or was released: it is gone for good.
            return Err(StateError::NotHeld { name: name.into() });
        }
        // A grant of an earlier process: restore it only if its proof is genuine and unexpired.
        let Some(expires_unix_ms) = self.verify_proof(owner, name, holder, token, proof) else {
            return Err(stale());
        };
        if expires_unix_ms <= now.unix_ms {
            return Err(stale());
        }
        let mut entry = Entry {
            owner: owner.into(),
            holder: holder.into(),
            token,
            ttl,
            expires: now.mono,
            expires_unix_ms: now.unix_ms,
        };
        extend(&mut self.expiries, name, &mut entry, ttl, now);
        self.leases.insert(name.into(), entry);
        let held = self.held(name, now);
        events.push(Event::Acquired(held.grant.clone()));
        Ok((held, RenewKind::Restored, events))
    }

    /// Releases `name` without an authenticated owner; see [`LeaseTable::release_as`].
    pub fn release(
        &mut self,
        name: &str,
        holder: &str,
        token: u64,
        now: Now,
    ) -> Result<Vec<Event>, StateError> {
        self.release_as("", name, holder, token, now)
    }

    /// Releases `name` if `owner` was granted it for `holder` with `token`.
    pub fn release_as(
        &mut self,
        owner: &str,
        name: &str,
        holder: &str,
        token: u64,
        now: Now,
    ) -> Result<Vec<Event>, StateError> {
        self.validate(name, holder, None)?;
        let mut events = self.expire_due(now);
        let Some(entry) = self.leases.get(name) else {
            return Err(StateError::NotHeld { name: name.into() });
        };
        if entry.owner != owner {
            return Err(StateError::ForeignOwner { name: name.into() });
        }
        if entry.holder != holder || entry.token != token {
            return Err(StateError::StaleToken {
                name: name.into(),
                holder: holder.into(),
                token,
            });
        }
        let entry = self.leases.remove(name).expect("present above");
        self.expiries.remove(&(entry.expires, name.to_owned()));
        events.push(Event::Released(grant(name, &entry, now)));
        Ok(events)
    }

    /// The current grant of `name`.
    pub fn get(&mut self, name: &str, now: Now) -> (Option<Grant>, Vec<Event>) {
        let events = self.expire_due(now);
        let found = self.leases.get(name).map(|e| grant(name, e, now));
        (found, events)
    }

    /// Every current grant whose name starts with `prefix`, by name.
    pub fn list(&mut self, prefix: &str, now: Now) -> (Vec<Grant>, Vec<Event>) {
        let events = self.expire_due(now);
        let found = self
            .leases
            .range(prefix.to_owned()..)
            .take_while(|(n, _)| n.starts_with(prefix))
            .map(|(n, e)| grant(n, e, now))
            .collect();
        (found, events)
    }

    fn validate(&self, name: &str, holder: &str, ttl: Option<Duration>) -> Result<(), StateError> {
        if name.is_empty() {
            return Err(StateError::InvalidArgument("name is empty".into()));
        }
        if holder.is_empty() {
            return Err(StateError::InvalidArgument("holder is empty".into()));
        }
        if let Some(ttl) = ttl
            && (ttl.is_zero() || ttl > self.limits.max_ttl)
        {
            return Err(StateError::InvalidArgument(format!(
                "ttl {} ms is outside 1..={} ms",
                ttl.as_millis(),
                self.limits.max_ttl.as_millis()
            )));
        }
        Ok(())
    }

    fn held(&self, name: &str, now: Now) -> Held {
        let entry = &self.leases[name];
        Held {
            grant: grant(name, entry, now),
            proof: self.proof(
                &entry.owner,
                name,
                &entry.holder,
                entry.token,
                entry.expires_unix_ms,
            ),
        }
    }

    /// The MAC of a proof. An owner takes part only when there is one, so the proofs of a server
    /// without authentication stay exactly what they were before owners existed.
    fn mac(
        &self,
        owner: &str,
        name: &str,
        holder: &str,
        token: u64,
        expires_unix_ms: i64,
    ) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.proof_key).expect("HMAC takes keys of any size");
        for part in [name.as_bytes(), holder.as_bytes()] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac.update(&token.to_be_bytes());
        mac.update(&expires_unix_ms.to_be_bytes());
        if !owner.is_empty() {
            mac.update(&(owner.len() as u64).to_be_bytes());
            mac.update(owner.as_bytes());
        }
        mac
    }

    fn proof(
        &self,
        owner: &str,
        name: &str,
        holder: &str,
        token: u64,
        expires_unix_ms: i64,
    ) -> Vec<u8> {
        let mut out = expires_unix_ms.to_be_bytes().to_vec();
        out.extend(
            self.mac(owner, name, holder, token, expires_unix_ms)
                .finalize()
                .into_bytes(),
        );
        out
    }

    /// The wall-clock expiry a genuine proof vouches for.
    fn verify_proof(
        &self,
        owner: &str,
        name: &str,
        holder: &str,
        token: u64,
        proof: &[u8],
    ) -> Option<i64> {
        let (expiry, tag) = proof.split_at_checked(8)?;
        let expires_unix_ms = i64::from_be_bytes(expiry.try_into().ok()?);
        self.mac(owner, name, holder, token, expires_unix_ms)
            .verify_slice(tag)
            .ok()?;
        Some(expires_unix_ms)
    }
}

fn extend(
    expiries: &mut BTreeSet<(Instant, String)>,
    name: &str,
    entry: &mut Entry,
    ttl: Duration,
    now: Now,
) {
    expiries.remove(&(entry.expires, name.to_owned()));
    expiries.insert((now.mono + ttl, name.to_owned()));
    entry.ttl = ttl;
    entry.expires = now.mono + ttl;
    entry.expires_unix_ms = now.unix_ms.saturating_add(millis(ttl) as i64);
}

fn grant(name: &str, e: &Entry, now: Now) -> Grant {
    Grant {
        name: name.into(),
        holder: e.holder.clone(),
        ttl: e.ttl,
        remaining: e.expires.saturating_duration_since(now.mono),
        expires_unix_ms: e.expires_unix_ms,
        token: e.token,
    }
}

#[cfg(test)]
mod tests;
