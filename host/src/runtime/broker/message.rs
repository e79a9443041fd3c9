//! One issue request as a broker carries it: the fields a component gave,
//! plus its method and its lab, as one JSON object of strings; and the
//! names of the lab's own queues and streams.

use couponlab_contract::fields;
use serde_json::{Map, Value};

/// Most fields one message may carry.
pub const MAX_FIELDS: usize = 16;
/// Most bytes of one message's names and values, in all.
pub const MAX_BYTES: usize = 4096;

/// The body of a message: `fields`, with `method` set to the publishing
/// component's method and `lab` to its lab's id whatever the component put
/// there, so no component can hand its requests to another, nor to another
/// lab's consumers. `Err` says why it is refused.
pub fn encode(method: &str, lab: &str, fields: &[(String, String)]) -> Result<Vec<u8>, String> {
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
    object.insert(fields::LAB.into(), Value::String(lab.into()));
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

/// Whether a decoded message was published by the lab `lab`: one of
/// another lab (or of none) is never handed to a component here.
pub fn is_of_lab(message: &[(String, String)], lab: &str) -> bool {
    message
        .iter()
        .any(|(name, value)| name == fields::LAB && value == lab)
}

/// The names of the lab's own queues, exchanges, streams and subjects,
/// made from its id (and, for whoever reads a broker's listing, its
/// database's name): labs that share a broker never read each other's
/// messages, whatever their databases are named, and every host of one
/// lab reads the same ones.
/// How much of the lab's id the names carry: 48 bits of a random id, so
/// two labs' names collide with odds of one in 2^48.
const LAB_ID_IN_NAMES: usize = 12;

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
    /// The names for the lab `lab_id` on `database` (any text: only
    /// letters, digits, `_` and `-` are kept, which both brokers accept
    /// everywhere).
    pub fn for_lab(database: &str, lab_id: &str) -> Self {
        let id: String = lab_id.chars().take(LAB_ID_IN_NAMES).collect();
        let scope: String = format!("{database}-{id}")
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
            "0a1b",
            &[
                pair("memberId", "7"),
                pair("method", "REDIS_LUA"),
                pair("lab", "ffff"),
            ],
        )
        .unwrap();
        let mut decoded = decode(&body).unwrap();
        decoded.sort();
        assert_eq!(
            decoded,
            vec![
                pair("lab", "0a1b"),
                pair("memberId", "7"),
                pair("method", "REDIS_LUA_RABBITMQ")
            ]
        );
        assert!(is_of_lab(&decoded, "0a1b"));
        assert!(!is_of_lab(&decoded, "ffff"));
        assert!(!is_of_lab(&[pair("memberId", "7")], "0a1b"));
    }

    #[test]
    fn too_many_fields_or_bytes_are_refused_and_foreign_bodies_not_read() {
        let many: Vec<_> = (0..17).map(|n| pair(&n.to_string(), "x")).collect();
        assert!(encode("M", "L", &many).unwrap_err().contains("at most 16"));
        let large = [pair("big", &"x".repeat(MAX_BYTES))];
        assert!(encode("M", "L", &large).unwrap_err().contains("bytes"));
        assert_eq!(decode(b"not json"), None);
        assert_eq!(decode(b"[1, 2]"), None);
        assert_eq!(decode(br#"{"n": 3}"#), Some(vec![pair("n", "3")]));
    }

    #[test]
    fn names_keep_only_what_both_brokers_accept() {
        let names = Names::for_lab("couponlab test.1", "0123456789abcdef0123");
        assert_eq!(names.queue, "couponlab.couponlab_test_1-0123456789ab.issue");
        assert_eq!(names.stream, "COUPONLAB_couponlab_test_1-0123456789ab");
    }

    #[test]
    fn two_labs_on_databases_of_one_name_have_names_apart() {
        let mariadb = Names::for_lab("couponlab", "0123456789abcdef");
        let postgres = Names::for_lab("couponlab", "fedcba9876543210");
        assert_ne!(mariadb.queue, postgres.queue);
        assert_ne!(mariadb.stream, postgres.stream);
        assert_ne!(mariadb.subject, postgres.subject);
        assert_ne!(mariadb.dead_exchange, postgres.dead_exchange);
    }
}
