//! Dedicated connections: WATCH and MULTI/EXEC are connection state, so
//! they run on a connection borrowed from a bounded pool for as long as the
//! guest holds its `connection` resource, and that comes back only from a
//! state the host knows. On a Redis Cluster a dedicated connection goes to
//! the node owning the first key it names (WATCH's, or a pipeline's first
//! command with a key) and stays there, so MULTI, EXEC and UNWATCH, which
//! name none, reach the node holding the transaction; the keys of one
//! transaction share one slot (a coupon's do).

use std::sync::Arc;

use redis::{ErrorKind, RedisError, Value};

use super::connection::{ConnectionState, DedicatedPool, RedisConnection};
use super::pools::RESPONSE_TIMEOUT;
use crate::redis_target::errors::is_connection_error;
use crate::redis_target::{first_key, route_of};
use crate::runtime::bindings::redis::Command;

impl DedicatedPool {
    pub(super) async fn borrow(self: Arc<Self>) -> Result<RedisConnection, RedisError> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| RedisError::from((ErrorKind::Client, "the Redis pool is closed")))?;
        let idle = self.idle.lock().pop();
        let conn = match idle {
            Some(conn) => conn,
            None => self.target.connect(RESPONSE_TIMEOUT).await?,
        };
        Ok(RedisConnection {
            conn: Some(conn),
            node: None,
            held_multi: false,
            state: ConnectionState::default(),
            pool: self,
            _permit: permit,
        })
    }
}

impl ConnectionState {
    fn track(&mut self, name: &str) {
        match name {
            "MULTI" => self.in_multi = true,
            "WATCH" => self.watching = true,
            "UNWATCH" => self.watching = false,
            "EXEC" | "DISCARD" => {
                self.in_multi = false;
                self.watching = false;
            }
            _ => {}
        }
    }
}

impl RedisConnection {
    pub async fn execute(&mut self, name: &str, args: &[String]) -> Result<Value, RedisError> {
        let unbound_on_a_cluster = self.pool.target.is_cluster() && self.node.is_none();
        if unbound_on_a_cluster {
            if let Some(answer) = self.hold(name) {
                return Ok(answer);
            }
            self.node = first_key(name, args).map(route_of);
        }
        let mut cmd = redis::cmd(name);
        cmd.arg(args);
        let reply = if self.held_multi && self.node.is_some() {
            self.held_multi = false;
            self.state.track("MULTI");
            let mut pipe = redis::pipe();
            pipe.cmd("MULTI").add_command(cmd);
            self.send(pipe, 2)
                .await
                .map(|mut replies| replies.pop().unwrap_or(Value::Nil))
        } else {
            self.send_one(cmd).await
        };
        match &reply {
            Ok(_) => self.state.track(name),
            // EXEC answers EXECABORT when a queued command was rejected; the
            // transaction is over either way.
            Err(err) if name == "EXEC" && !is_connection_error(err) => self.state.track(name),
            Err(err) => self.failed(err),
        }
        reply
    }

    /// Answers, as Redis would, the transaction commands of a cluster
    /// connection that names no key yet: MULTI is held, and EXEC or DISCARD
    /// of a held MULTI end a transaction that queued nothing. `None` for
    /// every other command.
    fn hold(&mut self, name: &str) -> Option<Value> {
        match (name, self.held_multi) {
            ("MULTI", false) => {
                self.held_multi = true;
                Some(Value::Okay)
            }
            ("EXEC", true) => {
                self.held_multi = false;
                Some(Value::Array(Vec::new()))
            }
            ("DISCARD", true) => {
                self.held_multi = false;
                Some(Value::Okay)
            }
            _ => None,
        }
    }

    pub async fn pipeline(&mut self, commands: &[Command]) -> Result<Vec<Value>, RedisError> {
        if self.pool.target.is_cluster() && self.node.is_none() {
            self.node = commands
                .iter()
                .find_map(|command| first_key(&command.name.to_ascii_uppercase(), &command.args))
                .map(route_of);
        }
        let mut pipe = redis::pipe();
        let mut names: Vec<String> = Vec::with_capacity(commands.len() + 1);
        let send_held = self.held_multi && self.node.is_some();
        if send_held {
            self.held_multi = false;
            pipe.cmd("MULTI");
            names.push("MULTI".into());
        }
        for command in commands {
            pipe.cmd(&command.name).arg(&command.args);
            names.push(command.name.to_ascii_uppercase());
        }
        let mut replies = self.send(pipe, names.len()).await;
        for name in &names {
            self.state.track(name);
        }
        if let Err(err) = &replies {
            self.failed(err);
        }
        if send_held && let Ok(replies) = &mut replies {
            replies.remove(0);
        }
        replies
    }

    /// A connection error leaves this connection to be closed, and the
    /// idle ones too: they reach the same server, which went away.
    fn failed(&mut self, err: &RedisError) {
        if is_connection_error(err) {
            self.state.broken = true;
            self.pool.idle.lock().clear();
        }
    }

    /// One command on the connection's node.
    async fn send_one(&mut self, cmd: redis::Cmd) -> Result<Value, RedisError> {
        let conn = self
            .conn
            .as_mut()
            .expect("a borrowed connection is present until release");
        // Until the reply is in, the connection's state is unknown: a call
        // dropped here leaves it to be closed, not pooled.
        let was_broken = std::mem::replace(&mut self.state.broken, true);
        let reply = conn.query_at(cmd, self.node.as_ref()).await;
        self.state.broken = was_broken;
        reply
    }

    /// A pipeline of `count` commands on the connection's node, in order.
    async fn send(
        &mut self,
        pipe: redis::Pipeline,
        count: usize,
    ) -> Result<Vec<Value>, RedisError> {
        let conn = self
            .conn
            .as_mut()
            .expect("a borrowed connection is present until release");
        let was_broken = std::mem::replace(&mut self.state.broken, true);
        let replies = conn.pipeline_at(pipe, count, self.node.as_ref()).await;
        self.state.broken = was_broken;
        replies
    }

    /// Undoes what the guest left open and returns the connection to the pool.
    /// A broken connection, or one that cannot be reset, is closed instead.
    pub async fn release(mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        if self.state.broken {
            return;
        }
        let reset = if self.state.in_multi {
            Some("DISCARD")
        } else if self.state.watching {
            Some("UNWATCH")
        } else {
            None
        };
        if let Some(reset) = reset
            && conn
                .query_at(redis::cmd(reset), self.node.as_ref())
                .await
                .is_err()
        {
            return;
        }
        self.pool.idle.lock().push(conn);
    }
}
