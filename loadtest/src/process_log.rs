//! Reading a child process's log while it runs: the load test waits for
//! the line that says a process is ready (k6 starting its load, a consumer
//! consuming) and must keep the pipe drained after it.

use std::io::{BufRead, BufReader, Read};
use std::sync::mpsc;

/// Reads `log` to its end on a thread of its own, so the pipe never fills;
/// the receiver hears once for each line that contains `marker`. Every
/// other line goes to our stderr when `echo`, and is dropped otherwise.
/// The receiver disconnects when the log ends (the process exited).
pub fn watch(
    log: impl Read + Send + 'static,
    marker: &'static str,
    echo: bool,
) -> mpsc::Receiver<()> {
    let (tell, heard) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(log).lines().map_while(Result::ok) {
            if line.contains(marker) {
                let _ = tell.send(());
            } else if echo {
                eprintln!("{line}");
            }
        }
    });
    heard
}
