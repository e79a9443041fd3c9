//! Where a long invocation is: `[round 2/3 · postgres · 4/12
//! REPEATABLE_READ] ~3 min left`, printed before each run beside k6's own
//! progress, the time left reckoned from the pace of the runs done so far.

use std::time::{Duration, Instant};

/// The runs of one invocation (every round's), counted as they end.
pub struct Progress {
    runs: usize,
    done: usize,
    started: Instant,
}

impl Progress {
    pub fn new(runs: usize) -> Progress {
        Progress {
            runs,
            done: 0,
            started: Instant::now(),
        }
    }

    /// The line for the next run: its round (when there are several), its
    /// engine (when named), its place among its round's runs, its method,
    /// and the time left for every round once a run has ended.
    pub fn line(
        &self,
        round: Option<(u32, u32)>,
        engine: Option<&str>,
        of_round: (usize, usize),
        method: &str,
    ) -> String {
        let left = left(self.done, self.runs, self.started.elapsed());
        place(round, engine, of_round, method, left)
    }

    pub fn ended_one(&mut self) {
        self.done += 1;
    }
}

fn place(
    round: Option<(u32, u32)>,
    engine: Option<&str>,
    (run, runs): (usize, usize),
    method: &str,
    left: Option<Duration>,
) -> String {
    let mut parts = Vec::new();
    if let Some((round, rounds)) = round {
        parts.push(format!("round {round}/{rounds}"));
    }
    if let Some(engine) = engine {
        parts.push(engine.to_string());
    }
    parts.push(format!("{run}/{runs} {method}"));
    let left = left.map_or(String::new(), |left| format!(" {} left", about(left)));
    format!("[{}]{left}", parts.join(" · "))
}

/// The runs still to come at the mean pace of those done; unknown before
/// the first has ended.
fn left(done: usize, runs: usize, elapsed: Duration) -> Option<Duration> {
    (done > 0).then(|| elapsed / done as u32 * runs.saturating_sub(done) as u32)
}

/// A duration as a person reads an estimate: `~40 s`, `~3 min`, `~1 h 5 min`.
fn about(left: Duration) -> String {
    let seconds = left.as_secs();
    match seconds {
        0..90 => format!("~{} s", seconds.max(1)),
        90..5400 => format!("~{} min", (seconds + 30) / 60),
        _ => format!("~{} h {} min", seconds / 3600, seconds % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_says_where_it_is_and_how_long_the_rest_takes() {
        let minutes = |m: u64| Duration::from_secs(m * 60);
        // Three of twelve done in 3 minutes: nine to go at a minute each.
        let left = left(3, 12, minutes(3));
        assert_eq!(left, Some(minutes(9)));
        assert_eq!(
            place(
                Some((2, 3)),
                Some("postgres"),
                (4, 12),
                "REPEATABLE_READ",
                left
            ),
            "[round 2/3 · postgres · 4/12 REPEATABLE_READ] ~9 min left"
        );
        assert_eq!(
            place(None, None, (1, 2), "REDIS_LUA", None),
            "[1/2 REDIS_LUA]"
        );
        assert_eq!(
            super::left(0, 12, minutes(1)),
            None,
            "unknown before a run ends"
        );
        assert_eq!(about(Duration::from_secs(40)), "~40 s");
        assert_eq!(about(Duration::from_secs(3 * 3600 + 300)), "~3 h 5 min");
    }
}
