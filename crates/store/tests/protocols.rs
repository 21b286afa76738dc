//! The storage protocols on an in-memory store: locks, the shared tier's bound, the ban
//! log under compare-and-swap.

use std::time::Duration;

use cachet_policy::object::Meta;
use cachet_refresh::Timestamp;
use cachet_store::locks::{self, Lock};
use std::rc::Rc;

use cachet_store::tier::{LocalTier, SharedTier, StoredObject, slot_count, slot_key};
use cachet_store::{MemoryStore, SharedData, bans};

fn object(key: &str, body: usize, at_ms: u64) -> StoredObject {
    let mut meta = Meta::marker("r", Timestamp::from_millis(at_ms), Duration::from_secs(60));
    meta.pass = false;
    meta.status = 200;
    StoredObject::new(key.to_owned(), meta, vec![b'x'; body])
}

#[test]
fn a_lock_has_one_owner_until_released_or_its_lease_ends() {
    let sd = MemoryStore::default();
    locks::init(&sd);
    assert_eq!(locks::acquire(&sd, 7, 1, 1_000, 2_000), Lock::Acquired);
    assert_eq!(locks::acquire(&sd, 7, 2, 1_500, 2_500), Lock::Held);
    assert!(locks::is_held(&sd, 7, 1_999));
    // Re-entrant for its owner.
    assert_eq!(locks::acquire(&sd, 7, 1, 1_500, 3_000), Lock::Acquired);
    locks::release(&sd, 7, 2);
    assert!(locks::is_held(&sd, 7, 2_000), "only the owner releases");
    locks::release(&sd, 7, 1);
    assert!(!locks::is_held(&sd, 7, 2_000));
    // A lease that ran out is taken over.
    assert_eq!(locks::acquire(&sd, 8, 1, 1_000, 1_100), Lock::Acquired);
    assert_eq!(locks::acquire(&sd, 8, 2, 1_200, 2_000), Lock::Acquired);
}

#[test]
fn the_shared_tier_stays_within_its_byte_bound() {
    let sd = MemoryStore::default();
    let bound = 64 * 1024;
    let tier = SharedTier {
        slots: slot_count(bound),
        bound,
        key: [1, 2],
        shards: 1,
    };
    for i in 0..200u64 {
        let mut o = object(&format!("k{i}"), 4_000, 1_000 + i);
        let r = tier.insert(&sd, &mut o, 1_000 + i);
        let (bytes, _) = SharedTier::add_totals(&sd, r.bytes_delta, r.objects_delta);
        assert!(bytes <= bound, "{bytes} > {bound} after insert {i}");
    }
    let dir = tier.dir(&sd, 0);
    assert!(dir.bytes <= bound);
    let last = tier.get(&sd, "k199").expect("the newest object is held");
    assert_eq!(last.body.len(), 4_000);
}

#[test]
fn ban_log_writes_are_never_lost_under_concurrent_appends() {
    let sd = MemoryStore::default();
    for k in [bans::LOG_KEY, bans::EPOCH_KEY] {
        cachet_store::init(&sd, k);
    }
    let e0 = bans::epoch(&sd);
    for i in 0..20 {
        let added =
            bans::add_ban(&sd, &format!("req.url == /p{i}"), 100, 1_000 + i).expect("accepted");
        assert!(!added.lurker_friendly);
    }
    // A writer holding a stale CAS token loses its write, and retries from the new log.
    let (_, stale) = sd.get(bans::LOG_KEY);
    bans::add_ban(&sd, "req.url == /other", 100, 2_000).expect("accepted");
    assert!(
        !sd.set(bans::LOG_KEY, b"{}", stale),
        "a stale token never overwrites"
    );
    let (log, _) = bans::read_log(&sd);
    assert_eq!(log.entries.len(), 21);
    assert!(bans::epoch(&sd) > e0, "every change bumps the epoch");
    assert_eq!(
        bans::add_ban(&sd, "req.url ==", 100, 3_000).map_err(|e| e.status()),
        Err(400)
    );
}

#[test]
fn the_in_vm_tier_keeps_an_inflated_copy_of_the_same_insert_only_and_counts_it() {
    let mut local = LocalTier::new(10_000);
    let mut obj = object("k", 100, 1_000);
    obj.h.version = 7;
    let obj = Rc::new(obj);
    local.put(Rc::clone(&obj));
    let before = local.bytes();
    assert_eq!(local.enrich(Rc::new(obj.with_identity(vec![b'y'; 400]))), 0);
    let kept = local.get("k").expect("still held");
    assert_eq!(kept.identity().map(<[u8]>::len), Some(400));
    assert_eq!(
        local.bytes(),
        before + 400,
        "the inflated copy counts in the bound"
    );
    // A copy of an older insert never replaces a newer one.
    let mut old = object("k", 100, 500);
    old.h.version = 6;
    local.enrich(Rc::new(old.with_identity(vec![b'z'; 10])));
    assert_eq!(local.get("k").expect("held").h.version, 7);
    // Nothing is added for a key the tier does not hold.
    local.enrich(Rc::new(object("other", 10, 1).with_identity(vec![1])));
    assert!(local.get("other").is_none());
}

/// A store that runs another worker's step right after the directory commit of this
/// worker's insert (the window between `cachet.dir` and the slot write).
struct Interleaved<'a> {
    inner: &'a MemoryStore,
    after_dir: std::cell::RefCell<Option<Box<dyn FnOnce() + 'a>>>,
}

impl SharedData for Interleaved<'_> {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        self.inner.get(key)
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        let ok = self.inner.set(key, value, cas);
        if ok && key.starts_with("cachet.dir.") && key != "cachet.dir.totals" {
            let step = self.after_dir.borrow_mut().take();
            if let Some(step) = step {
                step();
            }
        }
        ok
    }
}

/// Bytes held in object slots, and the accounted bytes of the entries whose slot holds
/// their own version.
fn held_and_accounted(sd: &MemoryStore, tier: &SharedTier) -> (u64, u64) {
    let dir = tier.dir(sd, 0);
    let mut held = 0;
    for slot in 0..u32::try_from(tier.slots).expect("slots fit u32") {
        held += sd.get(&slot_key(slot)).0.map_or(0, |v| v.len() as u64);
    }
    (held, dir.bytes)
}

#[test]
fn two_inserts_racing_for_one_slot_leave_the_one_the_directory_accounts_for() {
    let sd = MemoryStore::default();
    let tier = SharedTier {
        slots: slot_count(64 * 1024),
        bound: 64 * 1024,
        key: [3, 4],
        shards: 1,
    };
    // Two keys that share a slot.
    let a_key = "k0".to_owned();
    let b_key = (1..100_000)
        .map(|i| format!("k{i}"))
        .find(|k| tier.slot_of(k) == tier.slot_of(&a_key))
        .expect("a colliding key");
    // The directory shard exists (its creation is not the commit the hook waits for).
    sd.set("cachet.dir.0", &[], None);
    let small = std::cell::RefCell::new(object(&b_key, 100, 2_000));
    // Worker A commits its (large) object to the directory; before it writes the slot,
    // worker B inserts a small object into the same slot and finishes.
    let racing = Interleaved {
        inner: &sd,
        after_dir: std::cell::RefCell::new(Some(Box::new(|| {
            let r = tier.insert(&sd, &mut small.borrow_mut(), 2_000);
            assert!(r.stored, "B is stored");
        }))),
    };
    let mut large = object(&a_key, 20_000, 1_000);
    let r = tier.insert(&racing, &mut large, 1_000);
    assert!(r.stored, "A's directory commit went through");
    // The directory accounts for B (the newer insert); the slot must hold B, not A's late
    // write, and the bytes in slots never exceed what the directory counts.
    let held = tier.get(&sd, &b_key).expect("B is in the slot");
    assert_eq!(held.body.len(), 100);
    assert!(tier.get(&sd, &a_key).is_none(), "A's late write lost");
    let (held, accounted) = held_and_accounted(&sd, &tier);
    assert!(
        held <= accounted,
        "{held} bytes held, {accounted} accounted"
    );
}

#[test]
fn a_sharded_directory_keeps_the_whole_tier_within_its_bound() {
    let sd = MemoryStore::default();
    let bound = 256 * 1024;
    let tier = SharedTier {
        slots: slot_count(bound),
        bound,
        key: [5, 6],
        shards: 4,
    };
    for i in 0..400u64 {
        let mut o = object(&format!("k{i}"), 4_000, 1_000 + i);
        let r = tier.insert(&sd, &mut o, 1_000 + i);
        let held: u64 = (0..4).map(|s| tier.dir(&sd, s).bytes).sum();
        assert!(held <= bound, "{held} > {bound} after insert {i}");
        let (bytes, _) = SharedTier::add_totals(&sd, r.bytes_delta, r.objects_delta);
        assert_eq!(bytes, held, "the running totals match the shards");
    }
    let objects: usize = (0..4).map(|s| tier.dir(&sd, s).entries.len()).sum();
    assert!(objects > 40, "every shard holds objects: {objects}");
}

/// A polled fleet entry (`cachet_policy::etcd::Polled`): a ban with revision `id`.
fn polled_ban(id: u64, at_ms: u64, expr: &str) -> bans::LogEntry {
    bans::LogEntry {
        id,
        at_ms,
        kind: bans::Kind::Ban,
        expr: expr.to_owned(),
        key: None,
        lurker_friendly: true,
    }
}

#[test]
fn a_full_log_takes_the_fleet_floor_first_and_then_has_room_for_the_new_entries() {
    let sd = MemoryStore::default();
    let poll = |entries, floor_ms, through| cachet_store::etcd::Polled {
        entries,
        floor_ms,
        through,
        skipped: 0,
    };
    let old = vec![
        polled_ban(10, 1_000, "obj.http.x-url ~ ^/a"),
        polled_ban(11, 2_000, "obj.http.x-url ~ ^/b"),
    ];
    assert_eq!(
        bans::apply_polled(&sd, &poll(old, None, 11), 2, 5_000),
        Ok(2)
    );
    // Full at max = 2: a new entry alone is refused, and nothing is recorded.
    let new = vec![polled_ban(12, 3_000, "obj.http.x-url ~ ^/c")];
    assert!(bans::apply_polled(&sd, &poll(new.clone(), None, 12), 2, 6_000).is_err());
    assert_eq!(bans::read_log(&sd).0.feed_through, 11);
    // The fleet retired the two old entries (floor 2,000): they go, the new one fits.
    assert_eq!(
        bans::apply_polled(&sd, &poll(new, Some(2_000), 12), 2, 7_000),
        Ok(1)
    );
    let (log, _) = bans::read_log(&sd);
    assert_eq!(log.trimmed_at_ms, 2_000);
    assert_eq!(log.feed_through, 12);
    assert_eq!(
        log.entries
            .iter()
            .map(|e| (e.expr.as_str(), e.at_ms))
            .collect::<Vec<_>>(),
        vec![("obj.http.x-url ~ ^/c", 3_000)]
    );
    // Entries the floor already covers are not added again.
    let stale = vec![polled_ban(13, 1_500, "obj.http.x-url ~ ^/d")];
    assert_eq!(
        bans::apply_polled(&sd, &poll(stale, Some(2_000), 13), 2, 8_000),
        Ok(0)
    );
    assert_eq!(bans::read_log(&sd).0.feed_through, 13);
}
