//! What the kernel says about a process: CPU time (`/proc/<pid>/stat`) and peak resident memory
//! (`VmHWM` in `/proc/<pid>/status`, reset between rows through `clear_refs`).

use std::time::Duration;

/// User plus system CPU time of `pid` so far.
pub fn cpu_time(pid: u32, ticks_per_sec: f64) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_cpu_ticks(&stat)
        .map(|ticks| Duration::from_secs_f64(ticks as f64 / ticks_per_sec))
        .ok_or_else(|| anyhow::anyhow!("unexpected /proc/{pid}/stat: {stat}"))
}

/// utime + stime (fields 14 and 15); the command name (field 2) may hold spaces, so fields are
/// counted after its closing parenthesis.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Peak resident set size of `pid` in bytes since start or the last [`reset_peak_rss`].
pub fn peak_rss(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_kib(&status, "VmHWM:")
        .map(|kib| kib * 1024)
        .ok_or_else(|| anyhow::anyhow!("no VmHWM in /proc/{pid}/status"))
}

/// Resets the peak RSS of `pid` to its current RSS (Linux 4.0+).
pub fn reset_peak_rss(pid: u32) -> anyhow::Result<()> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")?;
    Ok(())
}

fn parse_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

/// Clock ticks per second for `/proc/<pid>/stat` (`getconf CLK_TCK`; 100 on Linux if unsure).
pub fn ticks_per_sec() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// CPU time of every process whose command name is `comm` (e.g. PostgreSQL's backends), summed;
/// processes that end between the listing and the read are skipped.
pub fn cpu_time_of_all(comm: &str, ticks_per_sec: f64) -> Duration {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Duration::ZERO;
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
        })
        .filter_map(|pid| cpu_time(pid, ticks_per_sec).ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_after_a_command_name_with_spaces() {
        let stat = "1234 (writ serve) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 8 0 100 0 0";
        assert_eq!(parse_cpu_ticks(stat), Some(300));
    }

    #[test]
    fn this_process_has_a_peak_rss_and_cpu_time() {
        let pid = std::process::id();
        assert!(peak_rss(pid).unwrap() > 1024 * 1024);
        assert!(cpu_time(pid, ticks_per_sec()).is_ok());
        assert_eq!(parse_kib("VmHWM:\t   2048 kB\n", "VmHWM:"), Some(2048));
    }
}
