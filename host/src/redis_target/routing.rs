//! Where a command goes on a cluster: the node owning its first key's slot,
//! or a node named by its address.

use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};

/// Routing to the node at `host:port`.
pub(super) fn at_address(host: String, port: u16) -> RoutingInfo {
    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port })
}

/// The master that owns `key`'s slot.
pub fn route_of(key: &str) -> Route {
    Route::with_key(key.as_bytes(), SlotAddr::Master)
}

/// The key a command names first, where routing looks for it: after the
/// key count of a script, after STREAMS of a stream read, else its first
/// argument; `None` for the commands that name none.
pub fn first_key<'a>(name: &str, args: &'a [String]) -> Option<&'a str> {
    match name {
        "MULTI" | "EXEC" | "DISCARD" | "UNWATCH" | "PING" | "ECHO" | "TIME" | "INFO" => None,
        "EVAL" | "EVALSHA" | "EVAL_RO" | "EVALSHA_RO" | "FCALL" | "FCALL_RO" => {
            let count: usize = args.get(1)?.parse().ok()?;
            (count > 0).then(|| args.get(2).map(String::as_str))?
        }
        "XREAD" | "XREADGROUP" => {
            let at = args
                .iter()
                .position(|arg| arg.eq_ignore_ascii_case("STREAMS"))?;
            args.get(at + 1).map(String::as_str)
        }
        _ => args.first().map(String::as_str),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_key_is_where_routing_looks_for_it() {
        let commands: [(&str, &[&str], Option<&str>); 6] = [
            ("WATCH", &["coupon:issued:{1}"], Some("coupon:issued:{1}")),
            (
                "EVALSHA",
                &["abc", "2", "coupon:issued:{1}", "coupon:total:{1}", "7"],
                Some("coupon:issued:{1}"),
            ),
            ("EVALSHA", &["abc", "0", "7"], None),
            (
                "XREADGROUP",
                &["GROUP", "g", "c", "STREAMS", "s:{1}", ">"],
                Some("s:{1}"),
            ),
            ("MULTI", &[], None),
            ("EXEC", &[], None),
        ];
        for (name, args, key) in commands {
            let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
            assert_eq!(first_key(name, &args), key, "{name} {args:?}");
        }
    }
}
