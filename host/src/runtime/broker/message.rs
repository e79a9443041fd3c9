//! One issue request as a broker carries it: the fields a component gave,
//! plus its method, as one JSON object of strings; and the names of the
//! lab's own queues and streams.

use couponlab_contract::fields;
use serde_json::{Map, Value};

/// Most fields one message may carry.
pub const MAX_FIELDS: usize = 16;
/// Most bytes of one message's names and values, in all.
pub const MAX_BYTES: usize = 4096;

/// The body of a message: `fields`, with `method` set to the publishing
/// component's method whatever the component put there, so no component
/// can hand its requests to another. `Err` says why it is refused.
pub fn encode(method: &str, fields: &[(String, String)]) -> Result<Vec<u8>, String> {
    if fields.len() > MAX_FIELDS {
        return Err(format!(
            "{} fields; a message carries at most {MAX_FIELDS}",
            fields.len()
        ));
    }
    let bytes: usize = fields
        .iter()
        .map(|(name, value)| name.len() + value.len())
        .sum();
    if bytes > MAX_BYTES {
        return Err(format!(
            "{bytes} bytes of fields; a message carries at most {MAX_BYTES}"
        ));
    }
    let mut object: Map<String, Value> = fields
        .iter()
        .map(|(name, value)| (name.clone(), Value::String(value.clone())))
        .collect();
    object.insert(fields::METHOD.into(), Value::String(method.into()));
    Ok(serde_json::to_vec(&object).expect("a map of strings serializes"))
}

/// The fields of a message body; `None` for a body that is not a JSON
/// object (not one of the lab's): values that are not strings are kept in
/// their JSON text.
pub fn decode(body: &[u8]) -> Option<Vec<(String, String)>> {
    let Value::Object(object) = serde_json::from_slice(body).ok()? else {
        return None;
    };
    Some(
        object
            .into_iter()
            .map(|(name, value)| match value {
                Value::String(text) => (name, text),
                other => (name, other.to_string()),
            })
            .collect(),
    )
}

/// The names of the lab's own queues, exchanges, streams and subjects,
/// made from its database's name: labs that share a broker but not a
/// database never read each other's messages.
#[derive(Debug, Clone)]
pub struct Names {
    /// RabbitMQ: the quorum queue requests go to (through the default exchange).
    pub queue: String,
    /// RabbitMQ: the fanout exchange a message past its delivery limit goes to.
    pub dead_exchange: String,
    /// RabbitMQ: where dead letters stay for someone to look at.
    pub dead_queue: String,
    /// RabbitMQ: the dead letters the host hands back to their components.
    pub dead_to_compensate: String,
    /// JetStream: the stream, its subject, and the durable consumer on it.
    pub stream: String,
    pub subject: String,
    pub durable: String,
    /// JetStream: the stream dead letters are copied to, and its subject.
    pub dead_stream: String,
    pub dead_subject: String,
}

impl Names {
    /// The names for the lab on `database` (any text: only letters, digits,
    /// `_` and `-` are kept, which both brokers accept everywhere).
    pub fn for_database(database: &str) -> Self {
        let scope: String = database
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Self {
            queue: format!("couponlab.{scope}.issue"),
            dead_exchange: format!("couponlab.{scope}.dead"),
            dead_queue: format!("couponlab.{scope}.dead"),
            dead_to_compensate: format!("couponlab.{scope}.dead.compensate"),
            stream: format!("COUPONLAB_{scope}"),
            subject: format!("couponlab.{scope}.issue"),
            durable: "issuers".into(),
            dead_stream: format!("COUPONLAB_{scope}_DEAD"),
            dead_subject: format!("couponlab.{scope}.dead"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str, value: &str) -> (String, String) {
        (name.into(), value.into())
    }

    #[test]
    fn the_host_sets_the_method_whatever_the_component_wrote() {
        let body = encode(
            "REDIS_LUA_RABBITMQ",
            &[pair("memberId", "7"), pair("method", "REDIS_LUA")],
        )
        .unwrap();
        let mut decoded = decode(&body).unwrap();
        decoded.sort();
        assert_eq!(
            decoded,
            vec![pair("memberId", "7"), pair("method", "REDIS_LUA_RABBITMQ")]
        );
    }

    #[test]
    fn too_many_fields_or_bytes_are_refused_and_foreign_bodies_not_read() {
        let many: Vec<_> = (0..17).map(|n| pair(&n.to_string(), "x")).collect();
        assert!(encode("M", &many).unwrap_err().contains("at most 16"));
        let large = [pair("big", &"x".repeat(MAX_BYTES))];
        assert!(encode("M", &large).unwrap_err().contains("bytes"));
        assert_eq!(decode(b"not json"), None);
        assert_eq!(decode(b"[1, 2]"), None);
        assert_eq!(decode(br#"{"n": 3}"#), Some(vec![pair("n", "3")]));
    }

    #[test]
    fn names_keep_only_what_both_brokers_accept() {
        let names = Names::for_database("couponlab test.1");
        assert_eq!(names.queue, "couponlab.couponlab_test_1.issue");
        assert_eq!(names.stream, "COUPONLAB_couponlab_test_1");
    }
}
