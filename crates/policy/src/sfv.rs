//! Whether a field value is a valid Structured Field Dictionary (RFC 8941 §3.2, parsed as
//! §4.2.2 says), for `CDN-Cache-Control` (RFC 9213 §2.1: the field is a Dictionary, and a
//! cache ignores a value that fails to parse, whole).
//!
//! Only validity is decided here; the directives themselves are read by
//! [`crate::response::CacheControl::parse`]. Shapes: the dictionary is
//! `member *(OWS "," OWS member)` with optional spaces around the whole value; a member is
//! a key, then either parameters (a bare key is boolean true) or `=` and an item or an
//! inner list; an item is a bare item and parameters. Keys are lower-case
//! (`lcalpha / "*"`, then `lcalpha / DIGIT / "_" / "-" / "." / "*"`); bare items are
//! integers (at most 15 digits), decimals (at most 12 integer and 3 fraction digits),
//! quoted strings (printable ASCII, `\"` and `\\` escapes), tokens, byte sequences
//! (`:base64:`) and booleans (`?0`, `?1`). An empty value is an empty dictionary.

/// Whether `value` parses as a Structured Field Dictionary (RFC 8941 §4.2.2). Never
/// panics; any byte outside the grammar (non-ASCII included) makes it invalid.
pub fn is_dictionary(value: &str) -> bool {
    let mut p = Parser {
        b: value.as_bytes(),
        i: 0,
    };
    p.skip(b" ");
    if p.done() {
        return true;
    }
    loop {
        if !p.key() {
            return false;
        }
        if p.eat(b'=') {
            if !p.member_value() {
                return false;
            }
        } else if !p.parameters() {
            return false;
        }
        p.skip(b" \t");
        if p.done() {
            return true;
        }
        if !p.eat(b',') {
            return false;
        }
        p.skip(b" \t");
        if p.done() {
            // A trailing comma.
            return false;
        }
    }
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn done(&self) -> bool {
        // Trailing spaces of the whole value are allowed (§4.2: discard them).
        self.b
            .get(self.i..)
            .is_none_or(|r| r.iter().all(|&c| c == b' '))
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn skip(&mut self, set: &[u8]) {
        while self.peek().is_some_and(|c| set.contains(&c)) {
            self.i += 1;
        }
    }

    /// `key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`.
    fn key(&mut self) -> bool {
        if !self
            .peek()
            .is_some_and(|c| c.is_ascii_lowercase() || c == b'*')
        {
            return false;
        }
        self.i += 1;
        self.skip(b"abcdefghijklmnopqrstuvwxyz0123456789_-.*");
        true
    }

    /// `parameters = *( ";" *SP key [ "=" bare-item ] )`.
    fn parameters(&mut self) -> bool {
        while self.eat(b';') {
            self.skip(b" ");
            if !self.key() || (self.eat(b'=') && !self.bare_item()) {
                return false;
            }
        }
        true
    }

    /// An item or an inner list.
    fn member_value(&mut self) -> bool {
        if self.eat(b'(') {
            loop {
                self.skip(b" ");
                if self.eat(b')') {
                    return self.parameters();
                }
                if !self.item() {
                    return false;
                }
                // Items are separated by at least one space, or the list ends.
                if !matches!(self.peek(), Some(b' ' | b')')) {
                    return false;
                }
            }
        }
        self.item()
    }

    fn item(&mut self) -> bool {
        self.bare_item() && self.parameters()
    }

    fn bare_item(&mut self) -> bool {
        match self.peek() {
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'"') => self.string(),
            Some(b':') => self.bytes(),
            Some(b'?') => {
                self.i += 1;
                self.eat(b'0') || self.eat(b'1')
            }
            Some(c) if c.is_ascii_alphabetic() || c == b'*' => {
                self.i += 1;
                self.skip(b"!#$%&'*+-.^_`|~:/0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ");
                true
            }
            _ => false,
        }
    }

    /// Integer (1 to 15 digits) or decimal (1 to 12 digits, `.`, 1 to 3 digits).
    fn number(&mut self) -> bool {
        self.eat(b'-');
        let start = self.i;
        self.skip(b"0123456789");
        let int = self.i - start;
        if int == 0 {
            return false;
        }
        if !self.eat(b'.') {
            return int <= 15;
        }
        let start = self.i;
        self.skip(b"0123456789");
        let frac = self.i - start;
        int <= 12 && (1..=3).contains(&frac)
    }

    fn string(&mut self) -> bool {
        self.i += 1;
        loop {
            match self.peek() {
                Some(b'"') => {
                    self.i += 1;
                    return true;
                }
                Some(b'\\') => {
                    self.i += 1;
                    if !(self.eat(b'"') || self.eat(b'\\')) {
                        return false;
                    }
                }
                Some(0x20..=0x7e) => self.i += 1,
                _ => return false,
            }
        }
    }

    fn bytes(&mut self) -> bool {
        self.i += 1;
        self.skip(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=");
        self.eat(b':')
    }
}

#[cfg(test)]
mod tests {
    use super::is_dictionary;

    #[test]
    fn cdn_cache_control_values_as_origins_send_them_are_dictionaries() {
        for v in [
            "",
            "max-age=600",
            "max-age=600, stale-while-revalidate=30",
            "no-store",
            "private",
            "  max-age=60 ,no-cache  ",
            "max-age=60;a=1;b",
            "a=(1 2 \"x\");p=?1, b=:aGk=:, c=1.5, d=tok/en:x, e=-3",
            "*k=?0",
        ] {
            assert!(is_dictionary(v), "{v:?}");
        }
    }

    #[test]
    fn values_outside_the_grammar_are_not_dictionaries() {
        for v in [
            "Max-Age=600",
            "max-age = 600",
            "max-age=600,",
            "max-age=600,,no-store",
            "max-age=\"600",
            "max-age=1234567890123456",
            "max-age=1.2345",
            "max-age=600 no-store",
            "a=(1 2",
            "a=(1\"x\")",
            "a=?2",
            "caf\u{e9}=1",
            "a=\"caf\u{e9}\"",
            "a=:aGk=",
            ",max-age=1",
        ] {
            assert!(!is_dictionary(v), "{v:?}");
        }
    }
}
