//! The state machine's tests: grants, renewals, restarts, proofs, expiry.

use super::*;

const TTL: Duration = Duration::from_secs(10);
const MAX: Duration = Duration::from_secs(30);

fn key() -> Vec<u8> {
    b"0123456789abcdef0123456789abcdef".to_vec()
}

/// A table of epoch `epoch` whose quiet period is over at the returned time.
fn table(epoch: u64, started: Now) -> (LeaseTable, Now) {
    let t = LeaseTable::new(
        Epoch {
            number: epoch,
            proof_key: key(),
        },
        Limits { max_ttl: MAX },
        started.mono,
    );
    (t, started.after(MAX))
}

fn t0() -> Now {
    Now {
        mono: Instant::now(),
        unix_ms: 1_700_000_000_000,
    }
}

fn granted(r: Result<(Acquired, Vec<Event>), StateError>) -> Held {
    match r.unwrap().0 {
        Acquired::Granted(h) => h,
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[test]
fn grant_then_renew_extends_with_the_same_token() {
    let (mut t, now) = table(1, t0());
    let (acq, events) = t.acquire("x/leader", "a", TTL, now).unwrap();
    let Acquired::Granted(held) = acq else {
        panic!("{acq:?}")
    };
    let expected = Grant {
        name: "x/leader".into(),
        holder: "a".into(),
        ttl: TTL,
        remaining: TTL,
        expires_unix_ms: now.unix_ms + 10_000,
        token: (1 << COUNTER_BITS) | 1,
    };
    assert_eq!(held.grant, expected);
    assert_eq!(events, vec![Event::Acquired(expected.clone())]);

    let later = now.after(Duration::from_secs(7));
    let (renewed, kind, events) = t
        .renew("x/leader", "a", held.grant.token, TTL, &[], later)
        .unwrap();
    assert_eq!(kind, RenewKind::Extended);
    assert!(events.is_empty(), "renewals are not events");
    assert_eq!(
        renewed.grant,
        Grant {
            expires_unix_ms: later.unix_ms + 10_000,
            ..expected
        }
    );
    // Still held just before the extended expiry, gone at it.
    assert!(
        t.get("x/leader", later.after(TTL - Duration::from_millis(1)))
            .0
            .is_some()
    );
}

#[test]
fn a_held_lease_is_refused_to_others_with_its_remaining_time() {
    let (mut t, now) = table(1, t0());
    let a = granted(t.acquire("x/leader", "a", TTL, now));
    let (acq, events) = t
        .acquire("x/leader", "b", TTL, now.after(Duration::from_secs(4)))
        .unwrap();
    assert!(events.is_empty());
    assert_eq!(
        acq,
        Acquired::HeldByOther {
            current: Grant {
                remaining: Duration::from_secs(6),
                ..a.grant
            }
        }
    );
}

#[test]
fn the_same_holder_acquiring_again_keeps_its_token() {
    let (mut t, now) = table(1, t0());
    let first = granted(t.acquire("x/leader", "a", TTL, now));
    let again = granted(t.acquire("x/leader", "a", TTL, now.after(Duration::from_secs(1))));
    assert_eq!(again.grant.token, first.grant.token);
    assert_eq!(
        again.grant.expires_unix_ms,
        first.grant.expires_unix_ms + 1000
    );
}

#[test]
fn expiry_frees_the_lease_and_another_holder_takes_over_with_a_higher_token() {
    let (mut t, now) = table(1, t0());
    let a = granted(t.acquire("x/leader", "a", TTL, now));
    let at_expiry = now.after(TTL);
    let events = t.expire_due(at_expiry);
    assert_eq!(
        events,
        vec![Event::Expired(Grant {
            remaining: Duration::ZERO,
            ..a.grant.clone()
        })]
    );
    let b = granted(t.acquire("x/leader", "b", TTL, at_expiry));
    assert_eq!(b.grant.holder, "b");
    assert!(b.grant.token > a.grant.token);
    // The old holder can neither renew nor release any more.
    let stale = StateError::StaleToken {
        name: "x/leader".into(),
        holder: "a".into(),
        token: a.grant.token,
    };
    assert_eq!(
        t.renew("x/leader", "a", a.grant.token, TTL, &a.proof, at_expiry)
            .unwrap_err(),
        stale
    );
    assert_eq!(
        t.release("x/leader", "a", a.grant.token, at_expiry)
            .unwrap_err(),
        stale
    );
}

#[test]
fn takeover_happens_inside_acquire_without_a_separate_expiry_pass() {
    let (mut t, now) = table(1, t0());
    let a = granted(t.acquire("x/leader", "a", TTL, now));
    let (acq, events) = t.acquire("x/leader", "b", TTL, now.after(TTL)).unwrap();
    assert!(matches!(acq, Acquired::Granted(ref h) if h.grant.holder == "b"));
    assert!(
        matches!(&events[..], [Event::Expired(g), Event::Acquired(_)] if g.token == a.grant.token)
    );
}

#[test]
fn renewing_after_expiry_is_refused_as_not_held() {
    let (mut t, now) = table(1, t0());
    let a = granted(t.acquire("x/leader", "a", TTL, now));
    let err = t
        .renew(
            "x/leader",
            "a",
            a.grant.token,
            TTL,
            &a.proof,
            now.after(TTL),
        )
        .unwrap_err();
    assert_eq!(
        err,
        StateError::NotHeld {
            name: "x/leader".into()
        }
    );
}

#[test]
fn release_frees_at_once_and_only_for_the_holder_with_its_token() {
    let (mut t, now) = table(1, t0());
    let a = granted(t.acquire("w/BackupJob/ns/j", "a", TTL, now));
    assert_eq!(
        t.release("w/BackupJob/ns/j", "b", a.grant.token, now)
            .unwrap_err(),
        StateError::StaleToken {
            name: "w/BackupJob/ns/j".into(),
            holder: "b".into(),
            token: a.grant.token
        }
    );
    assert!(matches!(
        t.release("w/BackupJob/ns/j", "a", a.grant.token + 1, now),
        Err(StateError::StaleToken { .. })
    ));
    let events = t
        .release("w/BackupJob/ns/j", "a", a.grant.token, now)
        .unwrap();
    assert_eq!(events, vec![Event::Released(a.grant.clone())]);
    assert_eq!(t.get("w/BackupJob/ns/j", now).0, None);
    let b = granted(t.acquire("w/BackupJob/ns/j", "b", TTL, now));
    assert!(b.grant.token > a.grant.token);
}

#[test]
fn stale_tokens_are_rejected() {
    let (mut t, now) = table(1, t0());
    let a = granted(t.acquire("x/leader", "a", TTL, now));
    for (holder, token) in [
        ("a", a.grant.token - 1),
        ("a", a.grant.token + 1),
        ("b", a.grant.token),
    ] {
        assert_eq!(
            t.renew("x/leader", holder, token, TTL, &[], now)
                .unwrap_err(),
            StateError::StaleToken {
                name: "x/leader".into(),
                holder: holder.into(),
                token
            }
        );
    }
}

#[test]
fn invalid_arguments_are_refused() {
    let (mut t, now) = table(1, t0());
    for (name, holder, ttl) in [
        ("", "a", TTL),
        ("x/leader", "", TTL),
        ("x/leader", "a", Duration::ZERO),
        ("x/leader", "a", MAX + Duration::from_millis(1)),
    ] {
        assert!(matches!(
            t.acquire(name, holder, ttl, now),
            Err(StateError::InvalidArgument(_))
        ));
    }
}

#[test]
fn list_returns_the_grants_under_a_prefix_in_name_order() {
    let (mut t, now) = table(1, t0());
    for name in ["b/leader", "a/x/2", "a/x/1", "a/y"] {
        granted(t.acquire(name, "h", TTL, now));
    }
    let names: Vec<String> = t.list("a/x/", now).0.into_iter().map(|g| g.name).collect();
    assert_eq!(names, ["a/x/1", "a/x/2"]);
    assert_eq!(t.list("", now).0.len(), 4);
}

#[test]
fn tokens_strictly_increase_per_name_across_a_simulated_restart() {
    let start = t0();
    let (mut first, now) = table(7, start);
    let mut tokens = Vec::new();
    let mut t = now;
    for _ in 0..3 {
        let h = granted(first.acquire("x/leader", "a", TTL, t));
        tokens.push(h.grant.token);
        first.release("x/leader", "a", h.grant.token, t).unwrap();
        t = t.after(Duration::from_millis(10));
    }
    // The restarted process loaded epoch 8; its counter starts again from 1.
    let (mut second, now) = table(8, t);
    for _ in 0..3 {
        let h = granted(second.acquire("x/leader", "a", TTL, now));
        tokens.push(h.grant.token);
        second.release("x/leader", "a", h.grant.token, now).unwrap();
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert_eq!(token_epoch(tokens[2]), 7);
    assert_eq!(token_epoch(tokens[3]), 8);
}

#[test]
fn after_a_restart_nothing_is_granted_for_one_max_ttl() {
    let start = t0();
    let (mut t, _) = table(2, start);
    let (acq, _) = t
        .acquire("x/leader", "a", TTL, start.after(Duration::from_secs(1)))
        .unwrap();
    assert_eq!(
        acq,
        Acquired::QuietPeriod {
            retry_after: MAX - Duration::from_secs(1)
        }
    );
    let before_end = start.after(MAX - Duration::from_millis(1));
    assert!(matches!(
        t.acquire("x/leader", "a", TTL, before_end).unwrap().0,
        Acquired::QuietPeriod { .. }
    ));
    granted(t.acquire("x/leader", "a", TTL, start.after(MAX)));
}

#[test]
fn a_proven_renewal_from_the_previous_epoch_restores_the_lease_during_the_quiet_period() {
    let start = t0();
    let (mut old, now) = table(3, start);
    let a = granted(old.acquire("x/leader", "a", TTL, now));
    // The server dies 2 s later and its successor starts at once.
    let restart = now.after(Duration::from_secs(2));
    let (mut new, _) = table(4, restart);
    let (held, kind, events) = new
        .renew("x/leader", "a", a.grant.token, TTL, &a.proof, restart)
        .unwrap();
    assert_eq!(kind, RenewKind::Restored);
    assert_eq!(
        held.grant.token, a.grant.token,
        "a restored lease keeps its token"
    );
    assert_eq!(events, vec![Event::Acquired(held.grant.clone())]);
    // Others are still refused: it is held.
    assert!(matches!(
        new.acquire("x/leader", "b", TTL, restart).unwrap().0,
        Acquired::HeldByOther { .. }
    ));
    // It renews on as usual with the new proof, and the next grant after it is higher.
    let (held, kind, _) = new
        .renew(
            "x/leader",
            "a",
            held.grant.token,
            TTL,
            &held.proof,
            restart.after(Duration::from_secs(5)),
        )
        .unwrap();
    assert_eq!(kind, RenewKind::Extended);
    new.release(
        "x/leader",
        "a",
        held.grant.token,
        restart.after(Duration::from_secs(6)),
    )
    .unwrap();
    let b = granted(new.acquire("x/leader", "b", TTL, restart.after(MAX)));
    assert!(b.grant.token > a.grant.token);
}

#[test]
fn unprovable_or_expired_previous_epoch_renewals_are_refused() {
    let start = t0();
    let (mut old, now) = table(3, start);
    let a = granted(old.acquire("x/leader", "a", TTL, now));
    let restart = now.after(Duration::from_secs(2));
    let (mut new, _) = table(4, restart);
    let stale = |holder: &str, token| StateError::StaleToken {
        name: "x/leader".into(),
        holder: holder.into(),
        token,
    };
    let token = a.grant.token;
    // No proof, a forged one, a proof for another holder or token, a tampered expiry.
    let mut tampered = a.proof.clone();
    tampered[7] ^= 1;
    for (holder, token, proof) in [
        ("a", token, Vec::new()),
        ("a", token, vec![0; 40]),
        ("b", token, a.proof.clone()),
        ("a", token - 1, a.proof.clone()),
        ("a", token, tampered),
    ] {
        assert_eq!(
            new.renew("x/leader", holder, token, TTL, &proof, restart)
                .unwrap_err(),
            stale(holder, token)
        );
    }
    // A genuine proof whose expiry passed on the wall clock.
    assert_eq!(
        new.renew("x/leader", "a", token, TTL, &a.proof, now.after(TTL))
            .unwrap_err(),
        stale("a", token)
    );
    // A current-epoch token that is not held is simply gone.
    assert_eq!(
        new.renew("x/leader", "a", 4 << COUNTER_BITS | 9, TTL, &[], restart)
            .unwrap_err(),
        StateError::NotHeld {
            name: "x/leader".into()
        }
    );
}

#[test]
fn a_lease_is_bound_to_the_owner_it_was_granted_to() {
    let (mut t, now) = table(3, t0());
    let a = match t
        .acquire_as("sa:a", "x/leader", "pod-1", TTL, now)
        .unwrap()
        .0
    {
        Acquired::Granted(h) => h,
        other => panic!("not granted: {other:?}"),
    };
    // Another identity naming the same holder is not the holder.
    assert!(matches!(
        t.acquire_as("sa:b", "x/leader", "pod-1", TTL, now)
            .unwrap()
            .0,
        Acquired::HeldByOther { .. }
    ));
    let foreign = StateError::ForeignOwner {
        name: "x/leader".into(),
    };
    assert_eq!(
        t.renew_as(
            "sa:b",
            "x/leader",
            "pod-1",
            a.grant.token,
            TTL,
            &a.proof,
            now
        )
        .unwrap_err(),
        foreign
    );
    assert_eq!(
        t.release_as("sa:b", "x/leader", "pod-1", a.grant.token, now)
            .unwrap_err(),
        foreign
    );
    // Without authentication (empty owner) it is foreign too.
    assert_eq!(
        t.release("x/leader", "pod-1", a.grant.token, now)
            .unwrap_err(),
        foreign
    );
    // The owner itself renews and releases as before.
    let later = now.after(Duration::from_secs(1));
    t.renew_as(
        "sa:a",
        "x/leader",
        "pod-1",
        a.grant.token,
        TTL,
        &a.proof,
        later,
    )
    .unwrap();
    t.release_as("sa:a", "x/leader", "pod-1", a.grant.token, later)
        .unwrap();
    assert!(t.is_empty());
}

#[test]
fn a_restart_proof_restores_only_for_its_owner() {
    let (mut old, now) = table(3, t0());
    let a = match old
        .acquire_as("sa:a", "x/leader", "pod-1", TTL, now)
        .unwrap()
        .0
    {
        Acquired::Granted(h) => h,
        other => panic!("not granted: {other:?}"),
    };
    let restart = now.after(Duration::from_secs(2));
    let (mut new, _) = table(4, restart);
    assert!(matches!(
        new.renew_as(
            "sa:b",
            "x/leader",
            "pod-1",
            a.grant.token,
            TTL,
            &a.proof,
            restart
        ),
        Err(StateError::StaleToken { .. })
    ));
    assert!(matches!(
        new.renew("x/leader", "pod-1", a.grant.token, TTL, &a.proof, restart),
        Err(StateError::StaleToken { .. })
    ));
    let (held, kind, _) = new
        .renew_as(
            "sa:a",
            "x/leader",
            "pod-1",
            a.grant.token,
            TTL,
            &a.proof,
            restart,
        )
        .unwrap();
    assert_eq!(
        (held.grant.token, kind),
        (a.grant.token, RenewKind::Restored)
    );
}
