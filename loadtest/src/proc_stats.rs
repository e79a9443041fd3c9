//! What the kernel says about a process the runner started (Linux's
//! `/proc`): its resident memory, its CPU time, its open files.

/// Resident memory, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
}

/// CPU time used so far, user and system, in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count from after it.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let (user, system): (u64, u64) = (fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?);
    Some((user + system) as f64 / clock_ticks_per_second())
}

/// Open file descriptors.
pub fn open_fds(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

/// `sysconf(_SC_CLK_TCK)`, as `getconf` says (100 on Linux nearly always).
fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8_lossy(&out.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_time_and_files() {
        let me = std::process::id();
        assert!(rss_kib(me).is_some_and(|kib| kib > 0));
        let spent = cpu_seconds(me).unwrap();
        let mut n = 0u64;
        for i in 0..50_000_000u64 {
            n = n.wrapping_add(i ^ (n >> 3));
        }
        assert!(n != 1);
        assert!(
            cpu_seconds(me).unwrap() > spent,
            "time spent counting shows"
        );
        assert!(open_fds(me).is_some_and(|fds| fds >= 3));
    }
}
