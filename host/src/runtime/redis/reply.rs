//! Replies between redis-rs and WIT: the flat pre-order list the WIT
//! `reply` type describes (WIT has no recursive types), and what a reply
//! weighs before it is handed to a guest.

use redis::Value;

use crate::runtime::bindings::redis as wit;

/// Flattens a reply into the pre-order list of the WIT `reply` type.
pub fn flatten(value: Value, out: &mut Vec<wit::Value>) {
    match value {
        Value::Nil => out.push(wit::Value::Nil),
        Value::Int(i) => out.push(wit::Value::Int(i)),
        Value::BulkString(bytes) => out.push(wit::Value::Data(bytes)),
        Value::SimpleString(s) => out.push(wit::Value::Status(s)),
        Value::Okay => out.push(wit::Value::Status("OK".into())),
        Value::Double(d) => out.push(wit::Value::Double(d)),
        Value::Boolean(b) => out.push(wit::Value::Boolean(b)),
        Value::VerbatimString { text, .. } => out.push(wit::Value::Data(text.into_bytes())),
        Value::BigNumber(digits) => out.push(wit::Value::Data(digits)),
        Value::Array(items) | Value::Set(items) | Value::Push { data: items, .. } => {
            out.push(wit::Value::Array(items.len() as u32));
            for item in items {
                flatten(item, out);
            }
        }
        Value::Map(pairs) => {
            out.push(wit::Value::Array(2 * pairs.len() as u32));
            for (key, value) in pairs {
                flatten(key, out);
                flatten(value, out);
            }
        }
        Value::Attribute { data, .. } => flatten(*data, out),
        Value::ServerError(err) => out.push(wit::Value::ServerError(match err.details() {
            Some(details) => format!("{} {details}", err.code()),
            None => err.code().to_string(),
        })),
        // A reply kind newer than this host: keep its text rather than fail.
        other => out.push(wit::Value::Data(format!("{other:?}").into_bytes())),
    }
}

/// The integer a reply carries first, as a trace reads it: an integer, a
/// numeric string (`GET` of a counter), or the first of an array's.
pub fn integer(reply: &[wit::Value]) -> Option<i64> {
    reply.iter().find_map(|value| match value {
        wit::Value::Array(_) => None,
        wit::Value::Int(i) => Some(Some(*i)),
        wit::Value::Data(bytes) => Some(
            std::str::from_utf8(bytes)
                .ok()
                .and_then(|text| text.parse().ok()),
        ),
        _ => Some(None),
    })?
}

/// Roughly the bytes a reply takes once flattened: its payloads plus a
/// small fixed cost per node.
pub fn weight(value: &Value) -> usize {
    const NODE: usize = 16;
    NODE + match value {
        Value::BulkString(bytes) | Value::BigNumber(bytes) => bytes.len(),
        Value::SimpleString(s) => s.len(),
        Value::VerbatimString { text, .. } => text.len(),
        Value::Array(items) | Value::Set(items) | Value::Push { data: items, .. } => {
            items.iter().map(weight).sum()
        }
        Value::Map(pairs) => pairs.iter().map(|(k, v)| weight(k) + weight(v)).sum(),
        Value::Attribute { data, .. } => weight(data),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // The flattened nodes; the redis crate's are written `Value::…`.
    use wit::Value::{Array, Data, Int, Nil, Status};

    fn flat(value: Value) -> Vec<wit::Value> {
        let mut out = Vec::new();
        flatten(value, &mut out);
        out
    }

    #[test]
    fn nested_arrays_keep_their_shape_in_pre_order() {
        // EXEC's reply to SET, INCR and LRANGE: OK, 1, ["a", "b"].
        let exec = Value::Array(vec![
            Value::Okay,
            Value::Int(1),
            Value::Array(vec![
                Value::BulkString(b"a".to_vec()),
                Value::BulkString(b"b".to_vec()),
            ]),
        ]);
        let (a, b) = (Data(b"a".to_vec()), Data(b"b".to_vec()));
        assert_eq!(
            flat(exec),
            [Array(3), Status("OK".into()), Int(1), Array(2), a, b]
        );
    }

    #[test]
    fn a_map_becomes_alternating_keys_and_values() {
        let map = Value::Map(vec![
            (Value::SimpleString("k".into()), Value::Int(7)),
            (Value::SimpleString("n".into()), Value::Nil),
        ]);
        let (k, n) = (Status("k".into()), Status("n".into()));
        assert_eq!(flat(map), [Array(4), k, Int(7), n, Nil]);
    }

    #[test]
    fn an_empty_array_is_one_node() {
        assert_eq!(flat(Value::Array(Vec::new())), [Array(0)]);
    }

    #[test]
    fn a_reply_weighs_its_payload() {
        let big = Value::Array(vec![Value::BulkString(vec![b'x'; 1 << 20]); 3]);
        let weight = weight(&big);
        assert!((3 << 20..(3 << 20) + 1024).contains(&weight), "{weight}");
        assert!(super::weight(&Value::Int(5)) < 64);
    }
}
