//! The passwords of the users the lab makes on its servers: the components'
//! SQL user and their Redis ACL user, each derived rather than stored, so
//! every process of a lab, and the capability that makes a user and the one
//! that logs in as it, agree without telling each other.

use sha2::{Digest, Sha256};

/// A password for `user` derived from an administrative URL's scheme and
/// credentials — not its host, port or path: servers of different databases
/// on one server, and a server reached through a proxy or another address,
/// derive the same one. Every process sharing a server sets the same
/// password for the user and none locks another out; anyone who can derive
/// it already holds the administrative credentials. A user of one lab's own
/// (the components' SQL user) has the lab's id in `user`, so labs whose
/// administrative credentials agree still derive passwords of their own.
pub fn derived_password(user: &str, admin_url: &str) -> String {
    let server = match url::Url::parse(admin_url) {
        Ok(url) => format!(
            "{}://{}:{}",
            url.scheme(),
            url.username(),
            url.password().unwrap_or_default()
        ),
        Err(_) => admin_url.to_string(),
    };
    hex::encode(Sha256::digest(format!("{user}\0{server}")))
}

#[cfg(test)]
mod tests {
    use super::derived_password;

    #[test]
    fn a_proxy_or_another_address_of_the_server_derives_the_same_password() {
        let direct = derived_password("u", "mysql://root@127.0.0.1:3306/couponlab");
        assert_eq!(
            direct,
            derived_password("u", "mysql://root@127.0.0.1:41234/couponlab_loadtest")
        );
        assert_ne!(
            direct,
            derived_password("u", "mysql://root:secret@127.0.0.1:3306/couponlab")
        );
        assert_ne!(
            direct,
            derived_password("v", "mysql://root@127.0.0.1:3306/couponlab")
        );
    }
}
