//! Helpers shared by the fuzz targets (`fuzz_targets/*.rs`): splitting one fuzz input
//! into several fields, and reading a number from its head.

/// The first `N` newline-separated fields of `data` (missing ones empty), then the rest
/// of the input after the `N`-th newline as one more field.
pub fn fields<const N: usize>(data: &[u8]) -> ([&[u8]; N], &[u8]) {
    let mut out = [&data[..0]; N];
    let mut rest = data;
    for f in &mut out {
        if let Some(i) = rest.iter().position(|&b| b == b'\n') {
            *f = &rest[..i];
            rest = &rest[i + 1..];
        } else {
            *f = rest;
            rest = &rest[rest.len()..];
        }
    }
    (out, rest)
}

/// A `u64` from the first (up to) 8 bytes of `data`, little-endian, and the rest.
pub fn take_u64(data: &[u8]) -> (u64, &[u8]) {
    let n = data.len().min(8);
    let mut buf = [0u8; 8];
    buf[..n].copy_from_slice(&data[..n]);
    (u64::from_le_bytes(buf), &data[n..])
}

/// `bytes` as text: the input when it is UTF-8, else its lossy conversion (so targets
/// that take `&str` still see every input).
pub fn text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}
