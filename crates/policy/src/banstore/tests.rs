use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use super::*;
use crate::banlog::HeaderRequest;
use cachet_refresh::Timestamp;

/// An in-memory versioned store. `conflicts` makes that many conditional writes fail as
/// if another writer came first (the item's generation moves on); `failing` makes every
/// call fail.
#[derive(Default)]
struct Kv {
    items: RefCell<HashMap<String, KvItem>>,
    next_generation: Cell<u64>,
    conflicts: Cell<usize>,
    failing: Cell<bool>,
    writes: Cell<usize>,
}

impl Kv {
    fn bump(&self) -> u64 {
        self.next_generation.set(self.next_generation.get() + 1);
        self.next_generation.get()
    }
    fn put(&self, name: &str, body: &[u8], metadata: Option<&str>) {
        let generation = self.bump();
        self.items.borrow_mut().insert(
            name.to_owned(),
            KvItem {
                body: body.to_vec(),
                generation,
                metadata: metadata.map(|m| m.as_bytes().to_vec()),
            },
        );
    }
    fn body(&self, name: &str) -> Option<Vec<u8>> {
        self.items.borrow().get(name).map(|i| i.body.clone())
    }
}

impl VersionedKv for Kv {
    fn lookup(&self, name: &str, max_body: Option<usize>) -> Result<Option<KvItem>, String> {
        if self.failing.get() {
            return Err("store down".into());
        }
        Ok(self.items.borrow().get(name).map(|i| {
            let mut i = i.clone();
            if let Some(max) = max_body {
                i.body.truncate(max);
            }
            i
        }))
    }

    fn insert(
        &self,
        name: &str,
        body: &[u8],
        metadata: Option<&str>,
        when: Precondition,
    ) -> Result<(), KvWriteError> {
        if self.failing.get() {
            return Err(KvWriteError::Failed("store down".into()));
        }
        let current = self.items.borrow().get(name).map(|i| i.generation);
        if when != Precondition::None && self.conflicts.get() > 0 {
            self.conflicts.set(self.conflicts.get() - 1);
            // Another writer: the item changes under us.
            if let Some(i) = self.items.borrow_mut().get_mut(name) {
                i.generation = self.next_generation.get() + 1;
            }
            self.bump();
            return Err(KvWriteError::Conflict);
        }
        if !when.holds(current) {
            return Err(KvWriteError::Conflict);
        }
        self.writes.set(self.writes.get() + 1);
        self.put(name, body, metadata);
        Ok(())
    }
}

const HOUR: Duration = Duration::from_secs(3600);

fn object(stored_ms: u64, url: &str) -> Meta {
    let mut m = Meta::marker("r", Timestamp::from_millis(stored_ms), HOUR);
    m.pass = false;
    m.status = 200;
    m.url = url.into();
    m
}

fn req(url: &str) -> HeaderRequest<'_> {
    HeaderRequest { url, headers: &[] }
}

fn copy(bytes: Vec<u8>) -> Bans<InMemoryCopy> {
    Bans::Copy(InMemoryCopy::new(bytes).expect("an index"))
}

#[test]
fn an_added_ban_is_in_the_log_the_index_and_the_copy() {
    let kv = Kv::default();
    let (added, bytes) = add(&kv, "obj.http.x-url ~ ^/blog/", 5_000, HOUR, 100).expect("accepted");
    assert_eq!(added.id, 1);
    let log = authoritative(&kv).expect("log");
    assert_eq!(log.entries.len(), 1);
    assert_eq!(kv.body(BAN_INDEX_ITEM), Some(bytes.clone()));
    let meta = kv.items.borrow()[BAN_LOG_ITEM].metadata.clone();
    assert_eq!(meta, Some(stamp(log.generation, log.next_id).into_bytes()));
    let bans = copy(bytes);
    let old = object(1_000, "/blog/a");
    assert_eq!(check(&bans, &old, &req("/blog/a")), Some(Covered::Ban(1)));
    assert_eq!(check(&bans, &object(1_000, "/css/a"), &req("/css/a")), None);
    assert_eq!(
        check(&bans, &object(6_000, "/blog/a"), &req("/blog/a")),
        None
    );
}

#[test]
fn a_conflicting_writer_is_retried_and_nothing_is_lost() {
    let kv = Kv::default();
    add(&kv, "obj.http.x-url ~ ^/a/", 1_000, HOUR, 100).expect("first");
    kv.conflicts.set(3);
    let (added, _) = add(&kv, "obj.http.x-url ~ ^/b/", 2_000, HOUR, 100).expect("retried");
    assert_eq!(added.id, 2);
    assert_eq!(authoritative(&kv).expect("log").entries.len(), 2);
}

#[test]
fn a_store_that_keeps_changing_is_a_clear_503() {
    let kv = Kv::default();
    kv.conflicts.set(MAX_CAS_ATTEMPTS);
    let err = add(&kv, "obj.http.x-url ~ ^/a/", 1_000, HOUR, 100).expect_err("gave up");
    assert_eq!(err.status(), 503);
    assert!(err.to_string().contains("kept changing"), "{err}");
    kv.failing.set(true);
    let err = add(&kv, "obj.http.x-url ~ ^/a/", 1_000, HOUR, 100).expect_err("down");
    assert_eq!(err.status(), 503);
    assert!(sync(&kv).is_err());
}

#[test]
fn a_bad_expression_writes_nothing() {
    let kv = Kv::default();
    let err = add(&kv, "obj.http.x-url ~~ (", 1_000, HOUR, 100).expect_err("refused");
    assert_eq!(err.status(), 400);
    assert_eq!(kv.writes.get(), 0);
}

#[test]
fn sync_rebuilds_a_missing_stale_or_corrupt_index_from_the_log() {
    let kv = Kv::default();
    assert!(BanIndex::from_bytes(&sync(&kv).expect("empty")).is_ok());
    let (_, first) = add(&kv, "obj.http.x-url ~ ^/a/", 1_000, HOUR, 100).expect("a");
    // A crash between the log write and the index write: the index is one ban behind.
    let (mut log, g) = read_log(&kv).expect("log");
    log.add_ban("obj.http.x-url ~ ^/b/", 2_000, 100).expect("b");
    let meta = stamp(log.generation, log.next_id);
    kv.insert(
        BAN_LOG_ITEM,
        &log.to_json(),
        Some(&meta),
        Precondition::Generation(g.unwrap_or(0)),
    )
    .expect("written");
    assert_eq!(kv.body(BAN_INDEX_ITEM), Some(first));
    let synced = sync(&kv).expect("rebuilt");
    let bans = copy(synced.clone());
    assert_eq!(
        check(&bans, &object(500, "/b/x"), &req("/b/x")),
        Some(Covered::Ban(2))
    );
    // ... and written back, so the next POP reads it as it is.
    assert_eq!(kv.body(BAN_INDEX_ITEM), Some(synced.clone()));
    assert_eq!(sync(&kv).expect("current"), synced);
    // A corrupt index is rebuilt too.
    kv.put(BAN_INDEX_ITEM, b"garbage", None);
    assert_eq!(sync(&kv).expect("rebuilt"), synced);
}

#[test]
fn a_log_without_a_stamp_in_its_metadata_is_read_from_its_body() {
    let kv = Kv::default();
    let mut log = BanLog::default();
    log.add_ban("obj.http.x-url ~ ^/a/", 1_000, 100).expect("a");
    kv.put(BAN_LOG_ITEM, &log.to_json(), None);
    let built = sync(&kv).expect("indexed");
    assert_eq!(built, banindex::encode(&log));
    let writes = kv.writes.get();
    assert_eq!(sync(&kv).expect("current"), built);
    assert_eq!(kv.writes.get(), writes, "a current index is not rewritten");
}

#[test]
fn an_older_index_never_replaces_a_newer_one() {
    let kv = Kv::default();
    let (_, old) = add(&kv, "obj.http.x-url ~ ^/a/", 1_000, HOUR, 100).expect("a");
    let (_, new) = add(&kv, "obj.http.x-url ~ ^/b/", 2_000, HOUR, 100).expect("b");
    write_index(&kv, &old).expect("no-op");
    assert_eq!(kv.body(BAN_INDEX_ITEM), Some(new));
}

#[test]
fn a_large_index_is_split_into_stamped_parts_and_joined() {
    let kv = Kv::default();
    let mut log = BanLog::default();
    for i in 0..64 {
        log.add_ban(&format!("obj.http.x-url ~ ^/p{i}/"), 1_000 + i, 1_000)
            .expect("ban");
    }
    let bytes = banindex::encode(&log);
    // Parts of KV_PART_LIMIT are too big to test; split by hand as write_index does and
    // check that read_index joins them, and refuses a missing part.
    let h = Header::parse(&bytes).expect("header");
    let (first, rest) = bytes.split_at(bytes.len() / 2);
    kv.put(BAN_INDEX_ITEM, first, None);
    kv.put(&part_name(h.next_id, 1), rest, None);
    assert_eq!(read_index(&kv), Some(bytes));
    kv.items.borrow_mut().remove(&part_name(h.next_id, 1));
    assert_eq!(read_index(&kv), None);
}

#[test]
fn unknown_bans_fail_closed_for_older_objects_only() {
    let bans: Bans<InMemoryCopy> = Bans::Unknown { since_ms: 5_000 };
    assert_eq!(
        check(&bans, &object(4_999, "/a"), &req("/a")),
        Some(Covered::Unknown)
    );
    assert_eq!(check(&bans, &object(5_000, "/a"), &req("/a")), None);
    let none: Bans<InMemoryCopy> = Bans::None;
    assert_eq!(check(&none, &object(1, "/a"), &req("/a")), None);
}

#[test]
fn copy_meta_round_trips_and_decides_without_reading() {
    let mut log = BanLog::default();
    log.add_ban("obj.http.x-url ~ ^/a/", 3_000, 100).expect("a");
    log.retire(10_000, Duration::from_millis(8_000)); // nothing retired yet
    let bytes = banindex::encode(&log);
    let m = CopyMeta::of(&Header::parse(&bytes).expect("header"));
    assert_eq!(CopyMeta::from_bytes(&m.to_bytes()), Some(m));
    assert_eq!(CopyMeta::from_bytes(&m.to_bytes()[..19]), None);
    assert_eq!(m.newest_at_ms, 3_001);
    // Whole and copy agree.
    let whole: Bans<InMemoryCopy> = Bans::Whole(bytes.clone());
    let copy = copy(bytes);
    for stored in [0, 2_999, 3_000, 9_000] {
        let o = object(stored, "/a/x");
        assert_eq!(
            check(&whole, &o, &req("/a/x")),
            check(&copy, &o, &req("/a/x"))
        );
    }
    assert_eq!(
        check(&copy, &object(2_999, "/a/x"), &req("/a/x")),
        Some(Covered::Ban(1))
    );
}

#[test]
fn retention_retires_old_bans_in_the_same_write() {
    let kv = Kv::default();
    add(
        &kv,
        "obj.http.x-url ~ ^/a/",
        1_000,
        Duration::from_secs(1),
        100,
    )
    .expect("a");
    add(
        &kv,
        "obj.http.x-url ~ ^/b/",
        10_000,
        Duration::from_secs(1),
        100,
    )
    .expect("b");
    let log = authoritative(&kv).expect("log");
    assert_eq!(log.entries.iter().map(|e| e.id).collect::<Vec<_>>(), [2]);
    let bans = copy(sync(&kv).expect("index"));
    // Below the raised floor: counted as banned (id 0).
    assert_eq!(
        check(&bans, &object(500, "/c"), &req("/c")),
        Some(Covered::Ban(0))
    );
}

/// A POP's core cache in memory: the copy (with whether it is due for a refresh) and the
/// failure marker; `down` makes the copy's lookup fail.
#[derive(Default)]
struct Pop {
    copy: Option<Vec<u8>>,
    due: bool,
    down: bool,
    marker: Option<u64>,
    published: usize,
    cancelled: usize,
}

impl PopCache for Pop {
    type Lookup = ();
    type Copy = InMemoryCopy;

    fn lookup(&mut self) -> Result<CopyLookup<(), InMemoryCopy>, String> {
        if self.down {
            return Err("core cache down".into());
        }
        Ok(CopyLookup {
            lookup: (),
            refresh: self.due || self.copy.is_none(),
            copy: self.copy.clone().and_then(InMemoryCopy::new),
        })
    }
    fn publish(&mut self, (): (), index: &[u8]) {
        self.copy = Some(index.to_vec());
        self.due = false;
        self.published += 1;
    }
    fn cancel(&mut self, (): ()) {
        self.cancelled += 1;
    }
    fn failed_since(&mut self) -> Option<u64> {
        self.marker
    }
    fn mark_failed(&mut self, since_ms: u64) {
        self.marker = Some(since_ms);
    }
    fn clear_failed(&mut self) {
        self.marker = None;
    }
}

#[test]
fn current_uses_the_fresh_copy_and_refreshes_a_due_one_from_the_store() {
    let kv = Kv::default();
    let (_, bytes) = add(&kv, "obj.http.x-url ~ ^/blog/", 5_000, HOUR, 100).expect("accepted");
    let mut pop = Pop::default();
    // No copy yet: synced from the store and published.
    let (bans, err) = current(&mut pop, || Ok(&kv), 6_000);
    assert!(matches!(bans, Bans::Whole(ref b) if *b == bytes) && err.is_none());
    assert_eq!(pop.published, 1);
    // Fresh copy: the store is not opened at all.
    let unused = || Err::<&Kv, _>(AdminError::Store("unused".into()));
    let (bans, err) = current(&mut pop, unused, 6_001);
    assert!(matches!(bans, Bans::Copy(_)) && err.is_none());
    assert_eq!(
        check(&bans, &object(1_000, "/blog/a"), &req("/blog/a")),
        Some(Covered::Ban(1))
    );
    // Due, store down: the previous copy stays in use, the obligation is given up.
    pop.due = true;
    kv.failing.set(true);
    let (bans, err) = current(&mut pop, || Ok(&kv), 7_000);
    assert!(matches!(bans, Bans::Copy(_)));
    assert!(err.is_some_and(|e| e.contains("store down")));
    assert_eq!((pop.cancelled, pop.marker), (1, None));
}

#[test]
fn current_fails_closed_without_a_copy_and_clears_the_marker_once_the_store_answers() {
    let kv = Kv::default();
    add(&kv, "obj.http.x-url ~ ^/blog/", 5_000, HOUR, 100).expect("accepted");
    kv.failing.set(true);
    let mut pop = Pop::default();
    let (bans, _) = current(&mut pop, || Ok(&kv), 10_000);
    assert!(matches!(bans, Bans::Unknown { since_ms: 10_000 }));
    assert_eq!(pop.marker, Some(10_000));
    // Still failing later: the failure keeps its first time, so objects fetched since
    // are served and older ones are not.
    let (bans, _) = current(&mut pop, || Ok(&kv), 20_000);
    assert!(matches!(bans, Bans::Unknown { since_ms: 10_000 }));
    assert_eq!(
        check(&bans, &object(9_000, "/css/a"), &req("/css/a")),
        Some(Covered::Unknown)
    );
    assert_eq!(
        check(&bans, &object(15_000, "/css/a"), &req("/css/a")),
        None
    );
    // The store answers: the index again, the marker gone.
    kv.failing.set(false);
    let (bans, err) = current(&mut pop, || Ok(&kv), 30_000);
    assert!(matches!(bans, Bans::Whole(_)) && err.is_none());
    assert_eq!(pop.marker, None);
}

#[test]
fn a_failed_copy_lookup_reads_the_store_instead_of_skipping_the_bans() {
    let kv = Kv::default();
    add(&kv, "obj.http.x-url ~ ^/blog/", 5_000, HOUR, 100).expect("accepted");
    let mut pop = Pop {
        down: true,
        ..Pop::default()
    };
    let (bans, err) = current(&mut pop, || Ok(&kv), 6_000);
    assert_eq!(
        check(&bans, &object(1_000, "/blog/a"), &req("/blog/a")),
        Some(Covered::Ban(1))
    );
    assert!(err.is_some_and(|e| e.contains("core cache down")));
    kv.failing.set(true);
    let (bans, _) = current(&mut pop, || Ok(&kv), 7_000);
    assert!(matches!(bans, Bans::Unknown { since_ms: 7_000 }));
}

#[test]
fn preconditions_hold_as_the_kv_store_decides() {
    assert!(Precondition::None.holds(None) && Precondition::None.holds(Some(3)));
    assert!(Precondition::Absent.holds(None) && !Precondition::Absent.holds(Some(1)));
    assert!(Precondition::Generation(2).holds(Some(2)));
    assert!(
        !Precondition::Generation(2).holds(Some(3)) && !Precondition::Generation(2).holds(None)
    );
}
