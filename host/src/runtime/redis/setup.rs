//! What the lab puts on the Redis it runs on, and puts back when Redis has
//! forgotten it: the components' ACL user ([`super::acl`]) and the script
//! threshold past which Redis answers everyone else `BUSY` and accepts
//! `SCRIPT KILL` ([`super::scripts`]). Redis keeps both in memory only, so
//! a restart loses them, and a cluster node that was down when the server
//! started never got them. Behind Sentinels, the user is made on the
//! replicas too (ACL SETUSER is not replicated), so a failover promotes a
//! node that has it; one that lacks it anyway is set up when it refuses the
//! user, as after a restart.

use redis::RedisError;

use super::acl;
use crate::redis_target::RedisConn;
use crate::redis_target::errors::is_connection_error;

/// The administrative connection and what it sets up.
pub struct NodeSetup {
    /// REDIS_URL's connection: the server's own user.
    pub admin: RedisConn,
    pub admin_url: String,
    /// Whether the server manages the components' user (false when the
    /// operator gave one as COUPONLAB_STRATEGY_REDIS_URL).
    pub creates_user: bool,
    /// `busy-reply-threshold`, in milliseconds.
    pub busy_script_ms: u64,
}

impl NodeSetup {
    /// Sets up every node, one by one: on a cluster, every master the
    /// cluster lists, each by its address (a node that did not answer when
    /// the connection started is not among those it routes an all-nodes
    /// command to). Only the user is required: a Redis that refuses CONFIG
    /// SET (a managed one) keeps its own threshold, and a runaway script is
    /// then killed that much later. A node that does not answer now is set
    /// up when it does (its refusal of the components' user brings the
    /// host back here).
    pub async fn apply(&self) -> Result<(), RedisError> {
        if self.creates_user {
            let answers = self
                .admin
                .clone()
                .on_each_master(acl::setuser(&self.admin_url))
                .await?;
            let mut unreachable = None;
            for answer in answers {
                match answer {
                    Ok(_) => {}
                    Err(err) if is_connection_error(&err) => unreachable = Some(err),
                    Err(err) => return Err(err),
                }
            }
            // A replica that does not answer now still gets the user if a
            // failover promotes it: it refuses the user, and the host comes
            // back here.
            let on_replicas = self
                .admin
                .on_each_replica(acl::setuser(&self.admin_url))
                .await
                .unwrap_or_else(|err| vec![Err(err)]);
            for answer in on_replicas {
                if let Err(err) = answer {
                    tracing::warn!(error = %err, "a Redis replica did not take the components' user; it gets it if promoted");
                }
            }
            if let Some(err) = unreachable {
                tracing::warn!(error = %err, "a Redis node did not answer; it gets the components' user when it does");
            }
        }
        let mut threshold = redis::cmd("CONFIG");
        threshold
            .arg("SET")
            .arg("busy-reply-threshold")
            .arg(self.busy_script_ms);
        let answers = self.admin.clone().on_each_master(threshold).await?;
        if let Some(err) = answers.into_iter().find_map(Result::err) {
            tracing::warn!(
                error = %err,
                "cannot set Redis's busy-reply-threshold; a script that outlives its call is killed only after Redis's own threshold"
            );
        }
        Ok(())
    }
}
