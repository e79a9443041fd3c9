//! Redis replies as a tree, rebuilt from the flat pre-order list the WIT
//! interface carries (WIT has no recursive types). What a reply a strategy
//! cannot decide on means for its request is [`crate::outcome`]'s
//! (`Reply::expect_int`).

use std::fmt;

use crate::bindings::couponlab::strategy::redis::Value;

#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Nil,
    Int(i64),
    Data(Vec<u8>),
    Status(String),
    Double(f64),
    Bool(bool),
    Array(Vec<Reply>),
    /// An error nested in a reply, such as one command failing inside EXEC.
    Error(String),
}

impl Reply {
    /// Rebuilds the tree. A list that ends early (which the host never
    /// sends) yields `Nil` for the missing elements.
    pub fn from_values(values: Vec<Value>) -> Reply {
        let mut values = values.into_iter();
        Self::take(&mut values)
    }

    fn take(values: &mut impl Iterator<Item = Value>) -> Reply {
        match values.next() {
            None | Some(Value::Nil) => Reply::Nil,
            Some(Value::Int(i)) => Reply::Int(i),
            Some(Value::Data(bytes)) => Reply::Data(bytes),
            Some(Value::Status(s)) => Reply::Status(s),
            Some(Value::Double(d)) => Reply::Double(d),
            Some(Value::Boolean(b)) => Reply::Bool(b),
            Some(Value::ServerError(e)) => Reply::Error(e),
            Some(Value::Array(n)) => Reply::Array((0..n).map(|_| Self::take(values)).collect()),
        }
    }

    /// The reply as an integer: an integer reply, or a bulk string holding one
    /// (GET of a counter).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(i) => Some(*i),
            Reply::Data(bytes) => std::str::from_utf8(bytes).ok()?.trim().parse().ok(),
            Reply::Status(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    /// The reply as text: a bulk or status string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Reply::Data(bytes) => std::str::from_utf8(bytes).ok(),
            Reply::Status(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Reply]> {
        match self {
            Reply::Array(items) => Some(items),
            _ => None,
        }
    }

    pub fn is_nil(&self) -> bool {
        matches!(self, Reply::Nil)
    }
}

/// A compact, redis-cli-like rendering: `[1, "two", [3], nil]`.
impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Nil => f.write_str("nil"),
            Reply::Int(i) => write!(f, "{i}"),
            Reply::Data(bytes) => write!(f, "{:?}", String::from_utf8_lossy(bytes)),
            Reply::Status(s) => f.write_str(s),
            Reply::Double(d) => write!(f, "{d}"),
            Reply::Bool(b) => write!(f, "{b}"),
            Reply::Error(e) => write!(f, "(error) {e}"),
            Reply::Array(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
        }
    }
}
