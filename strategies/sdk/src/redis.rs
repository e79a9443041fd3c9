//! Typed wrappers over the `redis` import: every reply comes back as a [`Reply`].

use crate::bindings::couponlab::strategy::redis as wit;
use crate::reply::Reply;

pub use wit::RedisError;

/// One command on the host's shared connection.
pub fn execute(name: &str, args: &[String]) -> Result<Reply, RedisError> {
    wit::execute(name, args).map(Reply::from_values)
}

/// A Lua script by source; the host runs it with EVALSHA.
pub fn eval(script: &str, keys: &[String], args: &[String]) -> Result<Reply, RedisError> {
    wit::eval(script, keys, args).map(Reply::from_values)
}

/// A dedicated connection, for WATCH and MULTI/EXEC. Dropping it returns it
/// to the host's pool with any open MULTI discarded.
pub struct Connection(wit::Connection);

impl Connection {
    pub fn open() -> Result<Self, RedisError> {
        wit::open().map(Connection)
    }

    pub fn execute(&self, name: &str, args: &[String]) -> Result<Reply, RedisError> {
        self.0.execute(name, args).map(Reply::from_values)
    }

    /// Sends every command in one round trip; one reply per command.
    pub fn pipeline(&self, commands: &[(&str, Vec<String>)]) -> Result<Vec<Reply>, RedisError> {
        let commands: Vec<wit::Command> = commands
            .iter()
            .map(|(name, args)| wit::Command {
                name: name.to_string(),
                args: args.clone(),
            })
            .collect();
        Ok(self
            .0
            .pipeline(&commands)?
            .into_iter()
            .map(Reply::from_values)
            .collect())
    }
}

impl RedisError {
    /// The host's message, for details and logs.
    pub fn message(&self) -> &str {
        match self {
            RedisError::Connection(message)
            | RedisError::Server(message)
            | RedisError::Refused(message) => message,
        }
    }
}
