//! What a request does with what its cache lookup found, decided once for both adapters.
//!
//! The adapters look up (Fastly's core cache transaction; Envoy's in-VM and shared tiers),
//! classify what they found as a [`Found`], say what the platform lets this request do
//! ([`Rights`]) and act on the [`Next`] step returned: serve (and maybe refresh after),
//! revalidate, fill, pass, purge and look up again, or answer `504`. Rules:
//!
//! * Fresh → serve, `HIT`. Refresh-ahead (threshold or XFetch fired while fresh) → serve
//!   `HIT` and refresh after the answer; stale within grace → serve `STALE` and refresh
//!   after (RFC 5861 §3 stale-while-revalidate; Varnish grace). Only the request with the
//!   right to fill refreshes; the others are served.
//! * Past grace (within keep) or missing → revalidate or fill when the request may fill,
//!   else wait for the request that does and share its answer (request collapsing of
//!   fills *and* revalidations, issue 28 item 9; the platform bounds the wait).
//! * The fill or revalidation this request waited for failed → the stored copy within
//!   grace or its `stale-if-error` window for every waiter (RFC 5861 §4: every request
//!   gets what the one that asked the origin got), else `503` (issue 28 items 5 and 8).
//! * `Cache-Control: only-if-cached` with nothing servable → `504` (RFC 9111 §5.2.1.7).
//! * A live hit-for-pass marker → pass (the key is private).
//! * A banned object → purged and looked up again when the platform can (its refetch is
//!   then collapsed), else fetched as if missing (Varnish's lookup-time ban check).
//! * An object the platform marks stale while our clock says fresh was soft-purged (Fastly
//!   soft purge, Varnish `ttl = 0`): stale when it has grace, else past grace — unless the
//!   soft purge was refresh-ahead's own (the platform's way to hand one request the right
//!   to refresh): then it is still fresh, served `HIT` by everyone while the request with
//!   the right refreshes it (issue 28 items 2 and 3).

use cachet_refresh::Freshness;

use crate::CacheStatus;

/// What a lookup found under the request's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// Nothing usable: no object, one in another layout, or a hit-for-pass marker whose
    /// time ran out.
    Nothing,
    /// A live hit-for-pass marker: the key is private.
    Marker,
    /// An object a ban covers (stored before a matching ban).
    Banned,
    /// A usable object.
    Object {
        /// Its freshness by its own times (`cachet_refresh::decide`).
        freshness: Freshness,
        /// The platform's cache holds it as stale though it is fresh by its times
        /// (soft-purged, or turned into a stale-while-revalidate object by refresh-ahead).
        soft_purged: bool,
        /// Its grace is not zero (a soft-purged object with grace may be served stale).
        has_grace: bool,
        /// The soft purge was refresh-ahead's own (the object is still fresh and is being
        /// refreshed ahead of its expiry); meaningful only with `soft_purged`.
        ahead: bool,
    },
    /// The fill or revalidation this request waited for failed after it began waiting.
    Failed {
        /// A stored copy may answer the failure (within grace or `stale-if-error`).
        servable: bool,
    },
}

/// What the platform lets this request do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rights {
    /// It may fetch and store the key's object (Fastly: it holds the core cache's
    /// obligation; Envoy: true, collapsing then elects one leader across workers).
    pub fill: bool,
    /// It may purge the found object and look up again (Fastly: the object has a tag and
    /// another lookup is allowed; Envoy: false, its lookup drops banned copies itself).
    pub relookup: bool,
    /// The client sent `Cache-Control: only-if-cached`.
    pub only_if_cached: bool,
}

/// The step to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Serve the found object labelled `status`; `refresh`: then refresh it in the
    /// background (the request holds the right to fill).
    Serve {
        /// `HIT` or `STALE`.
        status: CacheStatus,
        /// Refresh after the answer is sent.
        refresh: bool,
    },
    /// Purge the found object through its own tag (`soft`: soft purge, so exactly one
    /// request gets the right to refresh) and look up again.
    Relookup {
        /// Soft purge (refresh-ahead) rather than a hard one (ban).
        soft: bool,
    },
    /// Revalidate the found object before answering (a conditional fill, RFC 9111 §4.3).
    Revalidate,
    /// Fetch and store (a miss).
    Fill,
    /// Fetch without storing, labelled `status`: `PASS`, or `MISS` when another request
    /// is revalidating the object.
    Pass {
        /// The `X-Cache` label.
        status: CacheStatus,
    },
    /// Answer `504`: nothing servable and the client asked for `only-if-cached`.
    NotCached,
    /// Another request holds the right to fill or revalidate the key: wait for its answer
    /// and look up again (the platform bounds the wait, `[collapse].max_wait_ms`).
    Wait,
    /// The origin failed for the request this one waited for and nothing may be served:
    /// a clean `503` with `Retry-After`.
    Unavailable,
}

/// The step for `found` given `rights` (rules in the module docs).
pub fn next(found: Found, rights: Rights) -> Next {
    let fetch = || {
        if rights.only_if_cached {
            Next::NotCached
        } else if rights.fill {
            Next::Fill
        } else {
            Next::Pass {
                status: CacheStatus::Pass,
            }
        }
    };
    let (freshness, soft_purged) = match found {
        Found::Marker | Found::Failed { servable: false } if rights.only_if_cached => {
            return Next::NotCached;
        }
        Found::Marker => {
            return Next::Pass {
                status: CacheStatus::Pass,
            };
        }
        Found::Failed { servable: true } => {
            return Next::Serve {
                status: CacheStatus::Stale,
                refresh: false,
            };
        }
        Found::Failed { servable: false } => return Next::Unavailable,
        Found::Banned if rights.relookup && !rights.fill => {
            return Next::Relookup { soft: false };
        }
        Found::Banned => return fetch(),
        Found::Nothing if rights.fill || rights.only_if_cached => return fetch(),
        // Someone else is filling the key (the platform handed them the obligation).
        Found::Nothing => return Next::Wait,
        Found::Object {
            freshness: Freshness::Fresh | Freshness::RefreshAhead,
            soft_purged: true,
            has_grace,
            ahead,
        } => (
            if ahead {
                Freshness::RefreshAhead
            } else if has_grace {
                Freshness::Stale
            } else {
                Freshness::Expired
            },
            true,
        ),
        Found::Object {
            freshness,
            soft_purged,
            ..
        } => (freshness, soft_purged),
    };
    let serve = |status, refresh| Next::Serve { status, refresh };
    match freshness {
        Freshness::Fresh => serve(CacheStatus::Hit, false),
        Freshness::RefreshAhead if rights.fill => serve(CacheStatus::Hit, true),
        // Someone else is refreshing it (soft-purged already), or we cannot ask for the
        // right: serve it.
        Freshness::RefreshAhead if soft_purged || !rights.relookup => {
            serve(CacheStatus::Hit, false)
        }
        Freshness::RefreshAhead => Next::Relookup { soft: true },
        Freshness::Stale => serve(CacheStatus::Stale, rights.fill),
        Freshness::Expired | Freshness::Miss if rights.only_if_cached => Next::NotCached,
        Freshness::Expired | Freshness::Miss if rights.fill => Next::Revalidate,
        // Another request is revalidating it: share its answer.
        Freshness::Expired | Freshness::Miss => Next::Wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILL: Rights = Rights {
        fill: true,
        relookup: false,
        only_if_cached: false,
    };
    const WAIT: Rights = Rights {
        fill: false,
        relookup: true,
        only_if_cached: false,
    };

    fn object(freshness: Freshness) -> Found {
        Found::Object {
            freshness,
            soft_purged: false,
            has_grace: true,
            ahead: false,
        }
    }

    #[test]
    fn freshness_decides_serving_and_who_refreshes() {
        use CacheStatus::{Hit, Stale};
        let serve = |status, refresh| Next::Serve { status, refresh };
        assert_eq!(next(object(Freshness::Fresh), FILL), serve(Hit, false));
        assert_eq!(next(object(Freshness::Fresh), WAIT), serve(Hit, false));
        assert_eq!(
            next(object(Freshness::RefreshAhead), FILL),
            serve(Hit, true)
        );
        assert_eq!(
            next(object(Freshness::RefreshAhead), WAIT),
            Next::Relookup { soft: true },
            "refresh-ahead without the right: soft purge so one request gets it"
        );
        let no_relookup = Rights {
            relookup: false,
            ..WAIT
        };
        assert_eq!(
            next(object(Freshness::RefreshAhead), no_relookup),
            serve(Hit, false)
        );
        assert_eq!(next(object(Freshness::Stale), FILL), serve(Stale, true));
        assert_eq!(next(object(Freshness::Stale), WAIT), serve(Stale, false));
        assert_eq!(next(object(Freshness::Expired), FILL), Next::Revalidate);
        assert_eq!(
            next(object(Freshness::Expired), WAIT),
            Next::Wait,
            "issue 28 item 9: another request revalidates; wait for its answer"
        );
    }

    #[test]
    fn a_soft_purged_object_is_stale_within_grace_else_revalidated() {
        let purged = |freshness, has_grace| Found::Object {
            freshness,
            soft_purged: true,
            has_grace,
            ahead: false,
        };
        assert_eq!(
            next(purged(Freshness::Fresh, true), WAIT),
            Next::Serve {
                status: CacheStatus::Stale,
                refresh: false
            }
        );
        assert_eq!(
            next(purged(Freshness::Fresh, false), FILL),
            Next::Revalidate
        );
        assert_eq!(
            next(purged(Freshness::RefreshAhead, true), WAIT),
            Next::Serve {
                status: CacheStatus::Stale,
                refresh: false
            },
            "a soft purge (not refresh-ahead's own) ends freshness even past the threshold"
        );
        assert_eq!(
            next(purged(Freshness::RefreshAhead, false), WAIT),
            Next::Wait,
            "no grace: wait for the revalidation"
        );
    }

    #[test]
    fn refresh_aheads_own_soft_purge_keeps_the_copy_fresh_for_everyone() {
        // Issue 28 items 2 and 3: XFetch fired for one request, which soft-purged the copy
        // to get the right to refresh; everyone else keeps getting `HIT`, grace or not.
        for has_grace in [false, true] {
            for freshness in [Freshness::Fresh, Freshness::RefreshAhead] {
                let ahead = Found::Object {
                    freshness,
                    soft_purged: true,
                    has_grace,
                    ahead: true,
                };
                let serve = |refresh| Next::Serve {
                    status: CacheStatus::Hit,
                    refresh,
                };
                assert_eq!(next(ahead, FILL), serve(true), "{freshness:?} {has_grace}");
                assert_eq!(next(ahead, WAIT), serve(false), "{freshness:?} {has_grace}");
            }
        }
    }

    #[test]
    fn a_failure_while_waiting_answers_every_waiter_alike() {
        // Issue 28 items 5 and 8: the request that asked the origin failed; those that
        // waited for it get the stale copy within stale-if-error, else a 503, and never
        // ask the origin themselves.
        for rights in [FILL, WAIT] {
            assert_eq!(
                next(Found::Failed { servable: true }, rights),
                Next::Serve {
                    status: CacheStatus::Stale,
                    refresh: false
                }
            );
            assert_eq!(
                next(Found::Failed { servable: false }, rights),
                Next::Unavailable
            );
        }
        let oic = Rights {
            only_if_cached: true,
            ..WAIT
        };
        assert_eq!(
            next(Found::Failed { servable: false }, oic),
            Next::NotCached
        );
    }

    #[test]
    fn only_if_cached_never_reaches_the_origin() {
        let oic = |r: Rights| Rights {
            only_if_cached: true,
            ..r
        };
        for rights in [oic(FILL), oic(WAIT)] {
            for found in [
                Found::Nothing,
                Found::Marker,
                object(Freshness::Expired),
                object(Freshness::Miss),
            ] {
                assert_eq!(next(found, rights), Next::NotCached, "{found:?} {rights:?}");
            }
            assert!(matches!(
                next(object(Freshness::Stale), rights),
                Next::Serve { .. }
            ));
        }
    }

    #[test]
    fn nothing_markers_and_bans() {
        let pass = Next::Pass {
            status: CacheStatus::Pass,
        };
        assert_eq!(next(Found::Nothing, FILL), Next::Fill);
        assert_eq!(
            next(Found::Nothing, WAIT),
            Next::Wait,
            "another request fills"
        );
        assert_eq!(next(Found::Marker, FILL), pass);
        assert_eq!(next(Found::Marker, WAIT), pass);
        assert_eq!(next(Found::Banned, FILL), Next::Fill);
        assert_eq!(next(Found::Banned, WAIT), Next::Relookup { soft: false });
        let last = Rights {
            relookup: false,
            ..WAIT
        };
        assert_eq!(next(Found::Banned, last), pass);
    }
}
