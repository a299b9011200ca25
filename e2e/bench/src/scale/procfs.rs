//! A process's CPU time (`/proc/<pid>/stat`) and memory (`/proc/<pid>/status`).

/// Clock ticks per second of `utime`/`stime` (USER_HZ, 100 on every Linux the project runs on).
pub const TICKS_PER_SECOND: f64 = 100.0;

/// `utime + stime` in ticks from the text of `/proc/<pid>/stat`. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted after its last `)`.
pub fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 (index 0), utime field 14 (index 11), stime 15 (index 12).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// A `kB` field (`VmRSS`, `VmHWM`) of `/proc/<pid>/status`, in KiB.
pub fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// User + system CPU seconds of a running process.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_cpu_ticks(&stat).map(|t| t as f64 / TICKS_PER_SECOND)
}

/// `(VmRSS, VmHWM)` of a running process, in MiB.
pub fn memory_mib(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let mib = |f| parse_status_kib(&status, f).map(|k| k as f64 / 1024.0);
    Some((mib("VmRSS")?, mib("VmHWM")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_counted_after_a_name_with_spaces() {
        let stat =
            "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 137 25 0 0 20 0 4 0 100 0 0";
        assert_eq!(parse_cpu_ticks(stat), Some(162));
        assert_eq!(parse_cpu_ticks("4242 (short) S 1"), None);
    }

    #[test]
    fn memory_fields_are_read_in_kib() {
        let status = "Name:\tbackup-runner\nVmHWM:\t   48312 kB\nVmRSS:\t   40960 kB\n";
        assert_eq!(parse_status_kib(status, "VmRSS"), Some(40960));
        assert_eq!(parse_status_kib(status, "VmHWM"), Some(48312));
        assert_eq!(parse_status_kib(status, "VmSwap"), None);
    }

    #[test]
    fn this_process_can_be_read() {
        let pid = std::process::id();
        assert!(cpu_seconds(pid).is_some());
        let (rss, hwm) = memory_mib(pid).unwrap();
        assert!(rss > 0.0 && hwm >= rss);
    }
}
