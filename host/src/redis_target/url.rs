//! What REDIS_URL may say, checked before anything connects: a start with a
//! URL the lab cannot use says which setting, what is wrong with its value
//! and what it takes, rather than a bare error of the Redis client.

/// The schemes this build opens: TCP and Unix sockets, by Redis's names and
/// Valkey's. `rediss://` is not among them: the Redis client is built
/// without TLS.
const SCHEMES: [&str; 5] = ["redis", "valkey", "unix", "redis+unix", "valkey+unix"];

/// What REDIS_URL takes, for every error about it.
pub const ACCEPTED: &str = "REDIS_URL takes redis://[USER[:PASSWORD]@]HOST[:PORT][/DB] or \
     unix:///PATH[?db=DB] (valkey://, redis+unix:// and valkey+unix:// alike), or \
     redis+sentinel://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...]/MASTER[/DB] naming the \
     Sentinels of a primary; with --redis-cluster, a comma-separated list of the cluster's \
     seed nodes, each a redis:// URL";

/// Checks REDIS_URL as a whole: one URL, Sentinels, or with `cluster` a
/// list of seed nodes. Answers what is wrong, naming the setting and what
/// it takes; never the URL's password.
pub fn check(urls: &str, cluster: bool) -> Result<(), String> {
    if super::sentinel::is_sentinel(urls) {
        if cluster {
            return Err(format!(
                "REDIS_URL names Redis Sentinels, not a cluster: drop --redis-cluster; {ACCEPTED}"
            ));
        }
        return super::sentinel::SentinelUrl::parse(urls)
            .map(drop)
            .map_err(|problem| {
                format!("REDIS_URL names Redis Sentinels but {problem}; {ACCEPTED}")
            });
    }
    if !cluster {
        return check_one(urls.trim());
    }
    let seeds = super::seeds(urls);
    if seeds.is_empty() {
        return Err(format!("REDIS_URL names no seed node; {ACCEPTED}"));
    }
    seeds.into_iter().try_for_each(check_one)
}

/// Checks one Redis URL.
fn check_one(url: &str) -> Result<(), String> {
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(format!(
            "REDIS_URL is not a URL: it has no scheme (`redis://`); {ACCEPTED}"
        ));
    };
    if scheme == "rediss" || scheme == "valkeys" {
        return Err(format!(
            "REDIS_URL asks for TLS ({scheme}://), which this build's Redis client lacks; \
             {ACCEPTED}"
        ));
    }
    if !SCHEMES.contains(&scheme) {
        return Err(format!(
            "REDIS_URL's scheme {scheme}:// is not a Redis one; {ACCEPTED}"
        ));
    }
    redis::Client::open(url)
        .map(drop)
        .map_err(|err| format!("REDIS_URL does not parse ({err}); {ACCEPTED}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_the_lab_cannot_use_is_told_by_setting_problem_and_what_it_takes() {
        for (urls, cluster, problem) in [
            (
                "redis+sentinel://secret@127.0.0.1:26379",
                false,
                "names no master",
            ),
            (
                "redis+sentinel://127.0.0.1:26379/mymaster/0",
                true,
                "drop --redis-cluster",
            ),
            ("rediss://secret@127.0.0.1:6380/0", false, "TLS"),
            ("http://127.0.0.1:6379", false, "scheme http://"),
            ("127.0.0.1:6379", false, "no scheme"),
            ("", false, "no scheme"),
            (" , ", true, "no seed node"),
            (
                "redis://a:6379,memcached://b:11211",
                true,
                "scheme memcached://",
            ),
        ] {
            let told = check(urls, cluster).unwrap_err();
            assert!(told.starts_with("REDIS_URL"), "{urls}: {told}");
            assert!(told.contains(problem), "{urls}: {told}");
            assert!(told.contains(ACCEPTED), "{urls}: {told}");
            assert!(!told.contains("secret"), "{urls}: {told}");
        }
        for (urls, cluster) in [
            ("redis://127.0.0.1:6379/0", false),
            ("redis://user:pw@127.0.0.1/3", false),
            ("unix:///run/redis.sock?db=2", false),
            ("redis://a:7000, redis://b:7001", true),
            ("redis+sentinel://a:26379,b:26380/mymaster/2", false),
        ] {
            assert_eq!(check(urls, cluster), Ok(()), "{urls}");
        }
    }
}
