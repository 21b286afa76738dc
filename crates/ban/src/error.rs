//! The crate's one error type: why a ban expression, a time or a scenario was refused.

/// Everything this crate can refuse. Parse errors carry the 1-based **column** (counted in
/// Unicode scalar values of the expression) of the token at fault and what was expected,
/// in the spirit of Varnish's CLI messages (`varnish-cli`, `ban`): "expected conditional
/// (==, !=, ~ or !~) got ...".
///
/// Bad input never panics anywhere in this crate; it ends up here.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BanError {
    /// The expression is empty or only whitespace.
    #[error("empty ban expression: expected <field> <operator> <argument>")]
    Empty,
    /// The expression is longer than [`MAX_EXPR_BYTES`](crate::MAX_EXPR_BYTES).
    #[error("ban expression is {len} bytes, more than the limit of {max}")]
    TooLong {
        /// Length of the refused expression, bytes.
        len: usize,
        /// The limit, bytes.
        max: usize,
    },
    /// The expression has more than [`MAX_CONDITIONS`](crate::MAX_CONDITIONS) conditions.
    #[error("column {column}: more than {max} conditions joined by &&")]
    TooManyConditions {
        /// Column of the first condition over the limit.
        column: usize,
        /// The limit.
        max: usize,
    },
    /// A token is missing or is not what the grammar allows at this place.
    #[error("column {column}: expected {expected}, found {found}")]
    Syntax {
        /// Column of the offending token (one past the end for "end of expression").
        column: usize,
        /// What the grammar allows here.
        expected: &'static str,
        /// The token found, quoted, or `end of expression`.
        found: String,
    },
    /// The field is not one of the eight fields Varnish 7.4 accepts.
    #[error(
        "column {column}: unknown or unsupported field {field:?}; expected req.url, \
         req.http.<name>, obj.status, obj.http.<name>, obj.ttl, obj.age, obj.grace or obj.keep"
    )]
    UnknownField {
        /// Column of the field.
        column: usize,
        /// The field as written.
        field: String,
    },
    /// The header name after `req.http.` / `obj.http.` is empty or not an RFC 9110 token.
    #[error("column {column}: invalid header name {name:?} (expected an RFC 9110 token)")]
    BadHeaderName {
        /// Column of the field.
        column: usize,
        /// The name as written (possibly empty).
        name: String,
    },
    /// The operator does not apply to the field's type.
    #[error("column {column}: operator {op:?} does not apply to {field}; expected {allowed}")]
    BadOperator {
        /// Column of the operator.
        column: usize,
        /// The field it follows.
        field: String,
        /// The operator as written.
        op: String,
        /// The operators that do apply.
        allowed: &'static str,
    },
    /// A duration argument is not `<n.nn>(ms|s|m|h|d|w|y)`.
    #[error("column {column}: expected a duration <n.nn>(ms|s|m|h|d|w|y), found {found:?}")]
    BadDuration {
        /// Column of the argument.
        column: usize,
        /// The argument as written.
        found: String,
    },
    /// A `~` / `!~` argument is not a valid regular expression for the `regex` crate.
    #[error("column {column}: invalid regular expression: {message}")]
    BadRegex {
        /// Column of the argument.
        column: usize,
        /// The regex parser's or compiler's message.
        message: String,
    },
    /// A quoted token is unterminated, has a bad escape, or is glued to the next token.
    #[error("column {column}: {message}")]
    BadQuote {
        /// Column of the problem (the quote or the backslash).
        column: usize,
        /// What is wrong.
        message: &'static str,
    },
    /// A surrogate key given to
    /// [`BanList::add_surrogate_key_ban`](crate::BanList::add_surrogate_key_ban) is empty,
    /// contains whitespace, or is longer than
    /// [`MAX_SURROGATE_KEY_BYTES`](crate::MAX_SURROGATE_KEY_BYTES).
    #[error("invalid surrogate key {key:?}: {reason}")]
    BadSurrogateKey {
        /// The key as given (truncated to 64 characters).
        key: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A time given to the ban list is NaN or infinite.
    #[error("time {0} is not a finite number of seconds")]
    BadTime(f64),
    /// A scenario (see [`evaluate_scenario`](crate::evaluate_scenario)) is not valid JSON
    /// of the expected shape, or refers to an unknown object.
    #[error("scenario: {0}")]
    Scenario(String),
}
