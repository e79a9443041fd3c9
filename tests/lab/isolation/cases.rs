//! Hermitage's cases as steps of three sessions (T1, T2, T3 are 0, 1, 2)
//! on a table of two rows, `(1, 10)` and `(2, 20)`, each judged from what
//! the sessions read and what the table holds at the end.

use super::session::{Answer, Run};

/// The cases, in Hermitage's order.
pub const CASES: [&str; 11] = [
    "G0",
    "G1a",
    "G1b",
    "G1c",
    "OTV",
    "PMP",
    "P4",
    "G-single",
    "G-single, writing",
    "G2-item",
    "G2",
];

/// What a case came to.
pub struct Verdict {
    /// Whether the level kept the anomaly from happening.
    pub prevented: bool,
    /// How: a session waited for a lock, a statement or commit failed.
    blocked: bool,
    refused: bool,
}

impl Verdict {
    pub fn cell(&self) -> String {
        let how = match (self.blocked, self.refused) {
            (true, true) => " (blocked, refused)",
            (true, false) => " (blocked)",
            (false, true) => " (refused)",
            (false, false) => "",
        };
        if self.prevented {
            format!("✓{how}")
        } else {
            format!("—{how}")
        }
    }
}

/// Whether rows read hold `(id, value)`.
fn saw(answer: &Answer, id: i32, value: i32) -> bool {
    answer
        .as_ref()
        .is_ok_and(|rows| rows.contains(&(id, value)))
}

/// Runs the case `name` on `run`.
pub async fn run(name: &str, run: &mut Run) -> Verdict {
    let mut answers: Vec<Answer> = Vec::new();
    let anomaly = match name {
        "G0" => {
            // Write cycles: the two transactions' writes interleaved.
            run.step(0, "update test set value = 11 where id = 1").await;
            run.step(1, "update test set value = 12 where id = 1").await;
            run.step(0, "update test set value = 21 where id = 2").await;
            let c1 = run.step(0, "commit").await;
            run.step(1, "update test set value = 22 where id = 2").await;
            let c2 = run.step(1, "commit").await;
            answers.extend([c1.answer().await, c2.answer().await]);
            let rows = run.rows().await;
            rows == [(1, 11), (2, 22)] || rows == [(1, 12), (2, 21)]
        }
        "G1a" => {
            // Aborted reads: T2 sees a write T1 rolls back.
            run.step(0, "update test set value = 101 where id = 1")
                .await;
            let r1 = run.step(1, "select id, value from test").await;
            run.step(0, "rollback").await;
            let r2 = run.step(1, "select id, value from test").await;
            let c2 = run.step(1, "commit").await;
            answers.extend([r1.answer().await, r2.answer().await, c2.answer().await]);
            saw(&answers[0], 1, 101) || saw(&answers[1], 1, 101)
        }
        "G1b" => {
            // Intermediate reads: T2 sees a value T1 overwrote before committing.
            run.step(0, "update test set value = 101 where id = 1")
                .await;
            let r1 = run.step(1, "select id, value from test").await;
            run.step(0, "update test set value = 11 where id = 1").await;
            let c1 = run.step(0, "commit").await;
            let r2 = run.step(1, "select id, value from test").await;
            let c2 = run.step(1, "commit").await;
            answers.extend([r1.answer().await, r2.answer().await]);
            answers.extend([c1.answer().await, c2.answer().await]);
            saw(&answers[0], 1, 101) || saw(&answers[1], 1, 101)
        }
        "G1c" => {
            // Circular information flow: each sees the other's uncommitted write.
            run.step(0, "update test set value = 11 where id = 1").await;
            run.step(1, "update test set value = 22 where id = 2").await;
            let r1 = run.step(0, "select id, value from test where id = 2").await;
            let r2 = run.step(1, "select id, value from test where id = 1").await;
            let c1 = run.step(0, "commit").await;
            let c2 = run.step(1, "commit").await;
            answers.extend([r1.answer().await, r2.answer().await]);
            answers.extend([c1.answer().await, c2.answer().await]);
            saw(&answers[0], 2, 22) || saw(&answers[1], 1, 11)
        }
        "OTV" => {
            // Observed transaction vanishes: T3 sees T2's write to row 2,
            // then T1's write to row 1, which T2 overwrote.
            run.step(0, "update test set value = 11 where id = 1").await;
            run.step(0, "update test set value = 19 where id = 2").await;
            run.step(1, "update test set value = 12 where id = 1").await;
            let c1 = run.step(0, "commit").await;
            let r1 = run.step(2, "select id, value from test where id = 1").await;
            run.step(1, "update test set value = 18 where id = 2").await;
            let r2 = run.step(2, "select id, value from test where id = 2").await;
            let c2 = run.step(1, "commit").await;
            let r3 = run.step(2, "select id, value from test where id = 2").await;
            let r4 = run.step(2, "select id, value from test where id = 1").await;
            let c3 = run.step(2, "commit").await;
            for pending in [r1, r2, r3, r4, c1, c2, c3] {
                answers.push(pending.answer().await);
            }
            // Having seen T2's 18, seeing T1's 11 again: T2 vanished.
            (saw(&answers[1], 2, 18) || saw(&answers[2], 2, 18)) && saw(&answers[3], 1, 11)
        }
        "PMP" => {
            // Predicate-many-preceders: a predicate read sees a row inserted
            // after the transaction's first read.
            let r1 = run
                .step(0, "select id, value from test where value = 30")
                .await;
            run.step(1, "insert into test (id, value) values (3, 30)")
                .await;
            let c2 = run.step(1, "commit").await;
            let r2 = run
                .step(0, "select id, value from test where value % 3 = 0")
                .await;
            let c1 = run.step(0, "commit").await;
            answers.extend([r1.answer().await, r2.answer().await]);
            answers.extend([c1.answer().await, c2.answer().await]);
            saw(&answers[1], 3, 30)
        }
        "P4" => {
            // Lost update: both read row 1, both write it, both commit.
            run.step(0, "select id, value from test where id = 1").await;
            run.step(1, "select id, value from test where id = 1").await;
            let u1 = run.step(0, "update test set value = 11 where id = 1").await;
            let u2 = run.step(1, "update test set value = 11 where id = 1").await;
            let c1 = run.step(0, "commit").await;
            let c2 = run.step(1, "commit").await;
            for pending in [u1, u2, c1, c2] {
                answers.push(pending.answer().await);
            }
            answers.iter().all(Result::is_ok)
        }
        "G-single" => {
            // Read skew: T1 reads row 1 before T2's commit and row 2 after it.
            let r1 = run.step(0, "select id, value from test where id = 1").await;
            run.step(1, "select id, value from test where id = 1").await;
            run.step(1, "select id, value from test where id = 2").await;
            run.step(1, "update test set value = 12 where id = 1").await;
            run.step(1, "update test set value = 18 where id = 2").await;
            let c2 = run.step(1, "commit").await;
            let r2 = run.step(0, "select id, value from test where id = 2").await;
            let c1 = run.step(0, "commit").await;
            answers.extend([r1.answer().await, r2.answer().await]);
            answers.extend([c1.answer().await, c2.answer().await]);
            saw(&answers[0], 1, 10) && saw(&answers[1], 2, 18)
        }
        "G-single, writing" => {
            // Read skew through a write: T1 read row 1 before T2's commit,
            // then deletes by a predicate its snapshot says matches row 2.
            // A write that reads the latest row misses it: Hermitage's
            // "R/O" is this case on InnoDB.
            let r1 = run.step(0, "select id, value from test where id = 1").await;
            run.step(1, "select id, value from test").await;
            run.step(1, "update test set value = 12 where id = 1").await;
            run.step(1, "update test set value = 18 where id = 2").await;
            let c2 = run.step(1, "commit").await;
            let deleted = run.step(0, "delete from test where value = 20").await;
            let c1 = run.step(0, "commit").await;
            for pending in [r1, deleted, c1, c2] {
                answers.push(pending.answer().await);
            }
            let rows = run.rows().await;
            saw(&answers[0], 1, 10) && answers[1].is_ok() && rows.contains(&(2, 18))
        }
        "G2-item" => {
            // Write skew: each reads both rows and writes the other one.
            run.step(0, "select id, value from test where id in (1, 2)")
                .await;
            run.step(1, "select id, value from test where id in (1, 2)")
                .await;
            run.step(0, "update test set value = 11 where id = 1").await;
            run.step(1, "update test set value = 21 where id = 2").await;
            let c1 = run.step(0, "commit").await;
            let c2 = run.step(1, "commit").await;
            answers.extend([c1.answer().await, c2.answer().await]);
            run.rows().await == [(1, 11), (2, 21)]
        }
        "G2" => {
            // Anti-dependency cycle: each inserts what the other's predicate
            // read would have seen.
            run.step(0, "select id, value from test where value % 3 = 0")
                .await;
            run.step(1, "select id, value from test where value % 3 = 0")
                .await;
            run.step(0, "insert into test (id, value) values (3, 30)")
                .await;
            run.step(1, "insert into test (id, value) values (4, 42)")
                .await;
            let c1 = run.step(0, "commit").await;
            let c2 = run.step(1, "commit").await;
            answers.extend([c1.answer().await, c2.answer().await]);
            let rows = run.rows().await;
            rows.contains(&(3, 30)) && rows.contains(&(4, 42))
        }
        other => panic!("no case {other}"),
    };
    Verdict {
        prevented: !anomaly,
        blocked: run.blocked,
        refused: answers.iter().any(Result::is_err),
    }
}
