//! Ban expressions: tokenizer, parser, syntax tree, canonical display and evaluation.

use std::fmt;
use std::hash::{Hash, Hasher};

use crate::duration::BanDuration;
use crate::error::BanError;
use crate::matcher::{Hint, Matcher};
use crate::target::{BanRequest, BanTarget, SURROGATE_KEY_HEADER};
use crate::{MAX_CONDITIONS, MAX_EXPR_BYTES};

/// A field a ban condition tests: the eight fields of Varnish 7.4's `ban` command
/// (`varnish-cli(7)`, `ban <field> <operator> <arg> [&& ...]`).
///
/// Field names are case-sensitive (`REQ.URL` is refused, as in Varnish); header names
/// are case-insensitive and stored in ASCII lowercase. Fields must match exactly:
/// Varnish 7.1 accepted `req.urlfoo` as `req.url` (fixed in 7.4); this parser refuses it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Field {
    /// `req.url`: the lookup request's URL (string; not lurker-friendly).
    ReqUrl,
    /// `req.http.<name>`: a lookup request header (string; not lurker-friendly).
    ReqHttp(Box<str>),
    /// `obj.status`: the object's status, compared as a decimal string.
    ObjStatus,
    /// `obj.http.<name>`: a stored response header (string).
    ObjHttp(Box<str>),
    /// `obj.ttl`: remaining TTL at the ban's `added_at` (duration).
    ObjTtl,
    /// `obj.age`: age at the ban's `added_at` (duration).
    ObjAge,
    /// `obj.grace`: the object's grace (duration).
    ObjGrace,
    /// `obj.keep`: the object's keep (duration).
    ObjKeep,
}

impl Field {
    /// `true` for the `req.*` fields, which only a lookup can evaluate.
    pub fn is_req(&self) -> bool {
        matches!(self, Field::ReqUrl | Field::ReqHttp(_))
    }

    /// `true` for the duration fields (`obj.ttl`, `obj.age`, `obj.grace`, `obj.keep`).
    pub fn is_duration(&self) -> bool {
        matches!(
            self,
            Field::ObjTtl | Field::ObjAge | Field::ObjGrace | Field::ObjKeep
        )
    }

    fn parse(text: &str, column: usize) -> Result<Field, BanError> {
        let header = |name: &str| -> Result<Box<str>, BanError> {
            if !name.is_empty() && name.bytes().all(is_tchar) {
                Ok(name.to_ascii_lowercase().into())
            } else {
                Err(BanError::BadHeaderName {
                    column,
                    name: name.to_owned(),
                })
            }
        };
        Ok(match text {
            "req.url" => Field::ReqUrl,
            "obj.status" => Field::ObjStatus,
            "obj.ttl" => Field::ObjTtl,
            "obj.age" => Field::ObjAge,
            "obj.grace" => Field::ObjGrace,
            "obj.keep" => Field::ObjKeep,
            _ => {
                if let Some(name) = text.strip_prefix("req.http.") {
                    Field::ReqHttp(header(name)?)
                } else if let Some(name) = text.strip_prefix("obj.http.") {
                    Field::ObjHttp(header(name)?)
                } else {
                    return Err(BanError::UnknownField {
                        column,
                        field: text.to_owned(),
                    });
                }
            }
        })
    }
}

/// RFC 9110 §5.6.2 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::ReqUrl => f.write_str("req.url"),
            Field::ReqHttp(n) => write!(f, "req.http.{n}"),
            Field::ObjStatus => f.write_str("obj.status"),
            Field::ObjHttp(n) => write!(f, "obj.http.{n}"),
            Field::ObjTtl => f.write_str("obj.ttl"),
            Field::ObjAge => f.write_str("obj.age"),
            Field::ObjGrace => f.write_str("obj.grace"),
            Field::ObjKeep => f.write_str("obj.keep"),
        }
    }
}

/// A ban operator. String fields take `==`, `!=`, `~`, `!~`; duration fields take `==`,
/// `!=`, `<`, `<=`, `>`, `>=` (`varnish-cli(7)`, `ban`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `~`: regex match (unanchored search).
    Match,
    /// `!~`: regex does not match.
    NoMatch,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl Op {
    fn parse(text: &str) -> Option<Op> {
        Some(match text {
            "==" => Op::Eq,
            "!=" => Op::Ne,
            "~" => Op::Match,
            "!~" => Op::NoMatch,
            "<" => Op::Lt,
            "<=" => Op::Le,
            ">" => Op::Gt,
            ">=" => Op::Ge,
            _ => return None,
        })
    }

    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Match => "~",
            Op::NoMatch => "!~",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The argument of a condition.
#[derive(Debug, Clone)]
pub enum Value {
    /// A string (for `==`/`!=`) or a regex (for `~`/`!~`, compiled once at parse time).
    Str(Box<str>),
    /// A duration (for the duration fields).
    Duration(BanDuration),
}

#[derive(Debug, Clone)]
enum Test {
    Eq(Box<str>),
    Ne(Box<str>),
    Match(Matcher, Box<str>),
    NoMatch(Matcher, Box<str>),
    Dur(Op, BanDuration),
}

/// One `<field> <operator> <argument>` of a ban expression.
#[derive(Debug, Clone)]
pub struct Condition {
    field: Field,
    test: Test,
}

impl PartialEq for Condition {
    /// Structural equality on field, operator and argument text (a regex compares by its
    /// source); `1m` and `60s` are different.
    fn eq(&self, other: &Self) -> bool {
        self.field == other.field && self.op() == other.op() && self.arg_eq(other)
    }
}

impl Condition {
    /// Builds a condition, checking that `op` applies to `field` and compiling regexes.
    ///
    /// # Errors
    /// [`BanError::BadOperator`], [`BanError::BadRegex`] (column 0), or
    /// [`BanError::BadDuration`] when a string is given for a duration field or the other
    /// way round.
    pub fn new(field: Field, op: Op, value: Value) -> Result<Condition, BanError> {
        Condition::build(field, op, value, 0, 0)
    }

    fn build(
        field: Field,
        op: Op,
        value: Value,
        op_col: usize,
        val_col: usize,
    ) -> Result<Condition, BanError> {
        let bad_op = |allowed| BanError::BadOperator {
            column: op_col,
            field: field.to_string(),
            op: op.as_str().to_owned(),
            allowed,
        };
        let test = if field.is_duration() {
            if matches!(op, Op::Match | Op::NoMatch) {
                return Err(bad_op("one of ==, !=, <, <=, >, >="));
            }
            match value {
                Value::Duration(d) => Test::Dur(op, d),
                Value::Str(s) => {
                    return Err(BanError::BadDuration {
                        column: val_col,
                        found: s.into(),
                    });
                }
            }
        } else {
            let s = match value {
                Value::Str(s) => s,
                Value::Duration(d) => d.to_string().into(),
            };
            let regex = |s: &str| {
                Matcher::new(s).map_err(|message| BanError::BadRegex {
                    column: val_col,
                    message,
                })
            };
            match op {
                Op::Eq => Test::Eq(s),
                Op::Ne => Test::Ne(s),
                Op::Match => Test::Match(regex(&s)?, s),
                Op::NoMatch => Test::NoMatch(regex(&s)?, s),
                _ => return Err(bad_op("one of ==, !=, ~, !~")),
            }
        };
        Ok(Condition { field, test })
    }

    /// The field tested.
    pub fn field(&self) -> &Field {
        &self.field
    }

    /// The operator.
    pub fn op(&self) -> Op {
        match &self.test {
            Test::Eq(_) => Op::Eq,
            Test::Ne(_) => Op::Ne,
            Test::Match(..) => Op::Match,
            Test::NoMatch(..) => Op::NoMatch,
            Test::Dur(op, _) => *op,
        }
    }

    /// The argument (a clone; strings are the unescaped text, regexes their source).
    pub fn value(&self) -> Value {
        match &self.test {
            Test::Eq(s) | Test::Ne(s) | Test::Match(_, s) | Test::NoMatch(_, s) => {
                Value::Str(s.clone())
            }
            Test::Dur(_, d) => Value::Duration(*d),
        }
    }

    fn arg_eq(&self, other: &Condition) -> bool {
        match (&self.test, &other.test) {
            (
                Test::Eq(a) | Test::Ne(a) | Test::Match(_, a) | Test::NoMatch(_, a),
                Test::Eq(b) | Test::Ne(b) | Test::Match(_, b) | Test::NoMatch(_, b),
            ) => a == b,
            (Test::Dur(_, a), Test::Dur(_, b)) => {
                a.unit() == b.unit() && a.number().to_bits() == b.number().to_bits()
            }
            _ => false,
        }
    }

    /// What an index can use to find this condition's bans.
    pub(crate) fn hint(&self) -> Hint<'_> {
        match &self.test {
            Test::Eq(s) => Hint::Exact(s),
            Test::Match(m, _) => m.hint(),
            _ => Hint::None,
        }
    }

    /// Whether [`Condition::hint`] says everything: a value that satisfies the hint
    /// satisfies the condition (`==`, or a `~` whose regex is an exact, prefix or token
    /// shape; not a regex merely filed under its literal prefix).
    pub(crate) fn hint_is_complete(&self) -> bool {
        match &self.test {
            Test::Eq(_) => true,
            Test::Match(m, _) => !matches!(m, Matcher::Regex { .. }),
            _ => false,
        }
    }

    /// Evaluates the condition. `added_at_s` is the ban's time (for `obj.ttl`/`obj.age`);
    /// `req` is `None` in the lurker, where a `req.*` condition never matches.
    pub(crate) fn matches<T, R>(&self, obj: &T, req: Option<&R>, added_at_s: f64) -> bool
    where
        T: BanTarget + ?Sized,
        R: BanRequest + ?Sized,
    {
        if let Test::Dur(op, d) = &self.test {
            let have = match self.field {
                Field::ObjTtl => obj.ttl_s_at(added_at_s),
                Field::ObjAge => obj.age_s_at(added_at_s),
                Field::ObjGrace => obj.grace_s(),
                Field::ObjKeep => obj.keep_s(),
                _ => return false,
            };
            let want = d.seconds();
            #[allow(clippy::float_cmp, reason = "Varnish compares durations exactly")]
            return match op {
                Op::Eq => have == want,
                Op::Ne => have != want,
                Op::Lt => have < want,
                Op::Le => have <= want,
                Op::Gt => have > want,
                Op::Ge => have >= want,
                Op::Match | Op::NoMatch => false,
            };
        }
        let mut buf = [0u8; 5];
        let have: Option<&str> = match &self.field {
            Field::ReqUrl => match req {
                Some(r) => Some(r.url()),
                None => return false,
            },
            Field::ReqHttp(n) => match req {
                Some(r) => r.header(n),
                None => return false,
            },
            Field::ObjStatus => Some(status_str(obj.status(), &mut buf)),
            Field::ObjHttp(n) => obj_header(obj, n),
            _ => return false,
        };
        // Missing value (verified on Varnish 7.1): only `!=` matches.
        match (&self.test, have) {
            (Test::Eq(v), Some(h)) => h == &**v,
            (Test::Ne(v), Some(h)) => h != &**v,
            (Test::Match(m, _), Some(h)) => m.is_match(h),
            (Test::NoMatch(m, _), Some(h)) => !m.is_match(h),
            (Test::Ne(_), None) => true,
            _ => false,
        }
    }
}

/// `obj.http.<name>`; the surrogate-key header reads [`BanTarget::surrogate_keys`].
pub(crate) fn obj_header<'a, T: BanTarget + ?Sized>(obj: &'a T, name: &str) -> Option<&'a str> {
    if name == SURROGATE_KEY_HEADER {
        obj.surrogate_keys()
    } else {
        obj.header(name)
    }
}

/// Decimal status without allocating (Varnish prints it with `%u`).
pub(crate) fn status_str(status: u16, buf: &mut [u8; 5]) -> &str {
    let mut n = status;
    let mut i = buf.len();
    loop {
        i -= 1;
        // Cannot truncate: a digit is 0..=9.
        buf[i] = b'0' + u8::try_from(n % 10).unwrap_or(0);
        n /= 10;
        if n == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[i..]).unwrap_or("")
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} ", self.field, self.op())?;
        match &self.test {
            Test::Eq(s) | Test::Ne(s) | Test::Match(_, s) | Test::NoMatch(_, s) => {
                write_quoted(f, s)
            }
            Test::Dur(_, d) => write!(f, "{d}"),
        }
    }
}

/// Quotes `s` so that [`BanExpr::parse`] (and Varnish's CLI) read it back unchanged.
fn write_quoted(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str("\"")?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            c if c.is_ascii_control() => write!(f, "\\x{:02x}", c as u32)?,
            c => write!(f, "{c}")?,
        }
    }
    f.write_str("\"")
}

/// A parsed ban expression: one or more [`Condition`]s joined by `&&`; it matches when all
/// conditions match (Varnish has no `||`).
///
/// Grammar (Varnish 7.4 `ban`, as a single string — the CLI line after `ban`, or the
/// argument of VCL's `std.ban()`):
///
/// ```text
/// expr      = condition *( "&&" condition )
/// condition = field op argument            ; tokens separated by ASCII whitespace
/// token     = bare / quoted
/// bare      = 1*( char / escape )           ; char: anything but whitespace, '"', '\'
/// quoted    = '"' *( char / " " / escape ) '"' ; then whitespace or the end
/// escape    = "\n" / "\r" / "\t" / "\"" / "\\" / "\x" 2HEXDIG / "\" 1*3OCTDIG
/// ```
///
/// Escapes are processed in bare and quoted tokens alike, as Varnish's CLI does
/// (`varnishadm ban obj.http.x == a\\b` tests `a\b`). An unknown escape such as `\s` or
/// `\.` is kept as written (backslash included), so regexes read naturally; Varnish's CLI
/// refuses these ("Invalid backslash sequence"), so every expression both accept means the
/// same. Escapes must produce UTF-8 and no NUL. Any token may be quoted.
///
/// Extensions over Varnish 7.1's CLI, each checked with `scripts/varnish-diff`: a quoted
/// argument may contain spaces (`obj.http.x == "Foo bar"`; 7.1's CLI splits it and answers
/// "Wrong number of arguments", VCL's `std.ban()` keeps it whole, as here); `""` is an
/// empty string (7.1 drops empty arguments: "Too few parameters"); a quoted `"~"`
/// operator is accepted (7.1: "Missing separator between arguments").
///
/// Errors name the column and the expected token; see [`BanError`]. Limits:
/// [`MAX_EXPR_BYTES`], [`MAX_CONDITIONS`], and the regex limits.
#[derive(Debug, Clone, PartialEq)]
pub struct BanExpr {
    conditions: Box<[Condition]>,
}

impl BanExpr {
    /// Parses `text`.
    ///
    /// # Errors
    /// [`BanError::Empty`], [`BanError::TooLong`], [`BanError::TooManyConditions`],
    /// [`BanError::Syntax`], [`BanError::UnknownField`], [`BanError::BadHeaderName`],
    /// [`BanError::BadOperator`], [`BanError::BadDuration`], [`BanError::BadRegex`],
    /// [`BanError::BadQuote`]. Never panics.
    pub fn parse(text: &str) -> Result<BanExpr, BanError> {
        if text.len() > MAX_EXPR_BYTES {
            return Err(BanError::TooLong {
                len: text.len(),
                max: MAX_EXPR_BYTES,
            });
        }
        let tokens = tokenize(text)?;
        if tokens.is_empty() {
            return Err(BanError::Empty);
        }
        let end_col = text.chars().count() + 1;
        let mut conditions = Vec::new();
        let mut at = 0;
        loop {
            let Some(field_tok) = tokens.get(at) else {
                return Err(syntax(end_col, "a field after &&", None));
            };
            if conditions.len() == MAX_CONDITIONS {
                return Err(BanError::TooManyConditions {
                    column: field_tok.column,
                    max: MAX_CONDITIONS,
                });
            }
            let field = Field::parse(&field_tok.text, field_tok.column)?;
            let Some(op_tok) = tokens.get(at + 1) else {
                return Err(syntax(end_col, "an operator", None));
            };
            let Some(op) = Op::parse(&op_tok.text) else {
                let expected = if field.is_duration() {
                    "an operator (==, !=, <, <=, > or >=)"
                } else {
                    "an operator (==, !=, ~ or !~)"
                };
                return Err(syntax(op_tok.column, expected, Some(&op_tok.text)));
            };
            let Some(arg) = tokens.get(at + 2) else {
                return Err(syntax(end_col, "an argument", None));
            };
            let value = if field.is_duration() {
                match BanDuration::parse(&arg.text) {
                    Some(d) => Value::Duration(d),
                    None => {
                        // Report the operator first when it is also wrong, like Varnish.
                        if matches!(op, Op::Match | Op::NoMatch) {
                            Value::Str(arg.text.clone().into())
                        } else {
                            return Err(BanError::BadDuration {
                                column: arg.column,
                                found: arg.text.clone(),
                            });
                        }
                    }
                }
            } else {
                Value::Str(arg.text.clone().into())
            };
            conditions.push(Condition::build(
                field,
                op,
                value,
                op_tok.column,
                arg.column,
            )?);
            match tokens.get(at + 3) {
                None => break,
                Some(tok) if tok.text == "&&" => at += 4,
                Some(tok) => return Err(syntax(tok.column, "&& or the end", Some(&tok.text))),
            }
        }
        Ok(BanExpr {
            conditions: conditions.into_boxed_slice(),
        })
    }

    /// An expression from conditions.
    ///
    /// # Errors
    /// [`BanError::Empty`] for no conditions, [`BanError::TooManyConditions`] above
    /// [`MAX_CONDITIONS`], [`BanError::TooLong`] when the canonical text exceeds
    /// [`MAX_EXPR_BYTES`].
    pub fn from_conditions(conditions: Vec<Condition>) -> Result<BanExpr, BanError> {
        if conditions.is_empty() {
            return Err(BanError::Empty);
        }
        if conditions.len() > MAX_CONDITIONS {
            return Err(BanError::TooManyConditions {
                column: 0,
                max: MAX_CONDITIONS,
            });
        }
        let e = BanExpr {
            conditions: conditions.into_boxed_slice(),
        };
        let len = e.to_string().len();
        if len > MAX_EXPR_BYTES {
            return Err(BanError::TooLong {
                len,
                max: MAX_EXPR_BYTES,
            });
        }
        Ok(e)
    }

    /// The conditions, in written order.
    pub fn conditions(&self) -> &[Condition] {
        &self.conditions
    }

    /// `true` when every field is `obj.*`, so the background lurker can evaluate the ban
    /// without a request (Varnish Users Guide, "Lurker-Friendly Bans").
    pub fn is_lurker_friendly(&self) -> bool {
        self.conditions.iter().all(|c| !c.field.is_req())
    }

    /// `true` when the expression reads `obj.ttl` or `obj.age`, whose values depend on the
    /// ban's time; such bans are never deduplicated (see [`BanList`](crate::BanList)).
    pub fn is_time_relative(&self) -> bool {
        self.conditions
            .iter()
            .any(|c| matches!(c.field, Field::ObjTtl | Field::ObjAge))
    }

    /// Evaluates the expression against `obj` and the lookup request `req` for a ban added
    /// at `added_at_s` (seconds; `obj.ttl`/`obj.age` are read at that time). With
    /// `req == None` (the lurker's view) any `req.*` condition is false.
    pub fn matches<T, R>(&self, obj: &T, req: Option<&R>, added_at_s: f64) -> bool
    where
        T: BanTarget + ?Sized,
        R: BanRequest + ?Sized,
    {
        self.conditions
            .iter()
            .all(|c| c.matches(obj, req, added_at_s))
    }

    pub(crate) fn fingerprint(&self) -> u64 {
        let mut h = std::hash::DefaultHasher::new();
        self.to_string().hash(&mut h);
        h.finish()
    }
}

impl fmt::Display for BanExpr {
    /// Canonical form: `field op argument` joined by ` && `, header names lowercase,
    /// string arguments always quoted, durations bare. Parses back to an equal
    /// expression.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.conditions.iter().enumerate() {
            if i > 0 {
                f.write_str(" && ")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for BanExpr {
    type Err = BanError;
    /// Same as [`BanExpr::parse`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BanExpr::parse(s)
    }
}

fn syntax(column: usize, expected: &'static str, found: Option<&str>) -> BanError {
    BanError::Syntax {
        column,
        expected,
        found: found.map_or_else(|| "end of expression".to_owned(), |t| format!("{t:?}")),
    }
}

struct Token {
    text: String,
    column: usize,
}

fn tokenize(text: &str) -> Result<Vec<Token>, BanError> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let column = i + 1;
        if chars[i] == '"' {
            let mut bytes = Vec::new();
            i += 1;
            loop {
                let Some(&c) = chars.get(i) else {
                    return Err(BanError::BadQuote {
                        column,
                        message: "unterminated quoted string",
                    });
                };
                match c {
                    '"' => {
                        i += 1;
                        break;
                    }
                    '\\' => i = unescape(&chars, i, &mut bytes)?,
                    c => {
                        let mut b = [0u8; 4];
                        bytes.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
                        i += 1;
                    }
                }
            }
            if chars.get(i).is_some_and(|c| !c.is_ascii_whitespace()) {
                return Err(BanError::BadQuote {
                    column: i + 1,
                    message: "expected whitespace after the closing quote",
                });
            }
            tokens.push(Token {
                text: finish_token(bytes, column)?,
                column,
            });
        } else {
            let mut bytes = Vec::new();
            while i < chars.len() && !chars[i].is_ascii_whitespace() {
                match chars[i] {
                    '"' => {
                        return Err(BanError::BadQuote {
                            column: i + 1,
                            message: "a quote inside an unquoted token",
                        });
                    }
                    '\\' => i = unescape(&chars, i, &mut bytes)?,
                    c => {
                        let mut b = [0u8; 4];
                        bytes.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
                        i += 1;
                    }
                }
            }
            tokens.push(Token {
                text: finish_token(bytes, column)?,
                column,
            });
        }
    }
    Ok(tokens)
}

/// The token's text: UTF-8 without NUL.
fn finish_token(bytes: Vec<u8>, column: usize) -> Result<String, BanError> {
    if bytes.contains(&0) {
        return Err(BanError::BadQuote {
            column,
            message: "a NUL byte is not allowed",
        });
    }
    String::from_utf8(bytes).map_err(|_| BanError::BadQuote {
        column,
        message: "escape sequences must produce UTF-8",
    })
}

/// Decodes the escape at `chars[i] == '\\'` into `out`; returns the index after it.
fn unescape(chars: &[char], i: usize, out: &mut Vec<u8>) -> Result<usize, BanError> {
    let Some(&next) = chars.get(i + 1) else {
        return Err(BanError::BadQuote {
            column: i + 1,
            message: "unterminated quoted string",
        });
    };
    let simple = match next {
        'n' => Some(b'\n'),
        'r' => Some(b'\r'),
        't' => Some(b'\t'),
        '"' => Some(b'"'),
        '\\' => Some(b'\\'),
        _ => None,
    };
    if let Some(b) = simple {
        out.push(b);
        return Ok(i + 2);
    }
    if next == 'x' {
        let hex: String = chars.iter().skip(i + 2).take(2).collect();
        if hex.len() == 2
            && hex.chars().all(|c| c.is_ascii_hexdigit())
            && let Ok(b) = u8::from_str_radix(&hex, 16)
        {
            out.push(b);
            return Ok(i + 4);
        }
        return Err(BanError::BadQuote {
            column: i + 1,
            message: "\\x needs two hex digits",
        });
    }
    if ('0'..='7').contains(&next) {
        let mut v: u32 = 0;
        let mut j = i + 1;
        while j < i + 4 && chars.get(j).is_some_and(|c| ('0'..='7').contains(c)) {
            v = v * 8 + (chars[j] as u32 - '0' as u32);
            j += 1;
        }
        let Ok(b) = u8::try_from(v) else {
            return Err(BanError::BadQuote {
                column: i + 1,
                message: "octal escape above \\377",
            });
        };
        out.push(b);
        return Ok(j);
    }
    // Unknown escape: kept as written (a regex escape such as \s or \.).
    out.push(b'\\');
    Ok(i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{Object, Request};

    fn err(text: &str) -> String {
        BanExpr::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn parses_and_displays() {
        let e = BanExpr::parse(r#"req.url ~ "^/blog/" && obj.http.X-Foo != bar"#).unwrap();
        assert_eq!(
            e.to_string(),
            r#"req.url ~ "^/blog/" && obj.http.x-foo != "bar""#
        );
        assert!(!e.is_lurker_friendly());
        let e = BanExpr::parse("obj.ttl > 1.5m && obj.status == 200").unwrap();
        assert_eq!(e.to_string(), r#"obj.ttl > 1.5m && obj.status == "200""#);
        assert!(e.is_lurker_friendly());
        let e = BanExpr::parse(r#""req.url" "~" "a\sb\"c\\d""#).unwrap();
        assert_eq!(e.conditions()[0].to_string(), r#"req.url ~ "a\\sb\"c\\d""#);
        assert_eq!(BanExpr::parse(&e.to_string()).unwrap(), e);
    }

    #[test]
    fn errors_say_where_and_why() {
        assert_eq!(
            err("obj.status > 200"),
            "column 12: operator \">\" does not apply to obj.status; expected one of ==, !=, ~, !~"
        );
        assert!(
            err("req.urlfoo == /a")
                .starts_with("column 1: unknown or unsupported field \"req.urlfoo\"")
        );
        assert!(err("REQ.URL == /a").contains("unknown"));
        assert_eq!(
            err("obj.ttl > 1"),
            "column 11: expected a duration <n.nn>(ms|s|m|h|d|w|y), found \"1\""
        );
        assert_eq!(
            err("req.url == /a and x"),
            "column 15: expected && or the end, found \"and\""
        );
        assert_eq!(
            err("req.url == /a &&"),
            "column 17: expected a field after &&, found end of expression"
        );
        assert_eq!(
            err("req.url"),
            "column 8: expected an operator, found end of expression"
        );
        assert_eq!(
            err("req.url =="),
            "column 11: expected an argument, found end of expression"
        );
        assert!(err("req.url ~ (a").starts_with("column 11: invalid regular expression"));
        assert!(err("obj.http. ~ x").starts_with("column 1: invalid header name"));
        assert!(err("obj.http.x:y == 1").contains("invalid header name"));
        assert_eq!(
            err("   "),
            "empty ban expression: expected <field> <operator> <argument>"
        );
        assert!(err(r#"req.url == "abc"#).contains("unterminated"));
        assert!(err(r#"req.url == "a"b"#).contains("whitespace after the closing quote"));
        assert!(err(r#"req.url == a"b"#).contains("quote inside"));
        assert!(err(r#"req.url == "\xff""#).contains("UTF-8"));
        assert!(err(r#"req.url == "\0""#).contains("NUL"));
        assert!(err("obj.ttl ~ 1h").contains("does not apply to obj.ttl"));
        assert!(err(&"x".repeat(MAX_EXPR_BYTES + 1)).contains("limit"));
        let many = vec!["obj.status == 1"; MAX_CONDITIONS + 1].join(" && ");
        assert!(err(&many).contains("more than"));
    }

    #[test]
    fn escapes() {
        let e = BanExpr::parse(r#"req.url == "\x41\101\t\n\r\"\\\q""#).unwrap();
        let Value::Str(s) = e.conditions()[0].value() else {
            panic!()
        };
        assert_eq!(&*s, "AA\t\n\r\"\\\\q");
    }

    #[test]
    fn evaluates_like_varnish() {
        let obj = Object::new("/a", 0.0)
            .with_header("X-Foo", "bar")
            .with_header("x-empty", "")
            .with_status(404)
            .with_lifetimes(3600.0, 10.0, 0.0);
        let req = Request::new("/a/b").with_header("Cookie", "x=1");
        let m = |t: &str| BanExpr::parse(t).unwrap().matches(&obj, Some(&req), 100.0);
        assert!(m("obj.http.x-foo == bar"));
        assert!(m("obj.http.X-FOO ~ ^b"));
        assert!(!m("obj.http.x-foo == BAR"));
        assert!(m("obj.http.missing != bar"));
        assert!(!m("obj.http.missing !~ bar"));
        assert!(!m("obj.http.missing ~ ."));
        assert!(!m("obj.http.missing == bar"));
        assert!(m(r#"obj.http.x-empty == """#));
        assert!(!m(r#"obj.http.missing == """#));
        assert!(m("obj.status == 404"));
        assert!(!m("obj.status == 0404"));
        assert!(m("obj.status ~ ^4"));
        assert!(m("req.url ~ ^/a/"));
        assert!(m("req.http.cookie ~ x=1"));
        assert!(m("obj.ttl > 58m && obj.ttl < 59m"));
        assert!(m("obj.age == 100s"));
        assert!(m("obj.grace == 10s && obj.keep == 0s"));
        assert!(!m("obj.grace != 10s"));
        let none: Option<&Request> = None;
        assert!(
            !BanExpr::parse("req.url ~ .")
                .unwrap()
                .matches(&obj, none, 0.0)
        );
    }

    #[test]
    fn status_formatting() {
        let mut b = [0u8; 5];
        assert_eq!(status_str(0, &mut b), "0");
        assert_eq!(status_str(200, &mut b), "200");
        assert_eq!(status_str(65535, &mut b), "65535");
    }
}
