//! `BanIndex::from_bytes` / `from_head` and `check` on arbitrary bytes (what the edge app
//! reads from the KV store and its core-cache copy: anything, also another version's or a
//! damaged index): never a panic, and a head that opens answers a check or gives an error.
#![no_main]

use cachet_ban::Request;
use cachet_policy::banindex::BanIndex;
use cachet_policy::object::Meta;
use cachet_refresh::Timestamp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = BanIndex::from_bytes(data);
    let Ok(ix) = BanIndex::from_head(data) else {
        return;
    };
    let mut obj = Meta::marker("r", Timestamp::from_millis(1), std::time::Duration::from_secs(5));
    obj.pass = false;
    obj.status = 200;
    obj.url = "/blog/a/1".into();
    obj.surrogate_keys = vec!["k1".into(), "blog-a".into()];
    let req = Request::new("/blog/a/1").with_header("host", "blog.example");
    let _ = ix.check(data, &obj, &req);
    let _ = ix.check(&data[..data.len() / 2], &obj, &req);
});
