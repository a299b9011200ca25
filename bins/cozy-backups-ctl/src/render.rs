//! Tables and ages as kubectl prints them.

use k8s_openapi::jiff::Timestamp;

/// A table: upper-case headers, columns left-aligned and separated by three spaces, no trailing
/// blanks.
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.zip(&widths).enumerate() {
            if i > 0 {
                out.push_str("   ");
            }
            out.push_str(cell);
            out.extend(std::iter::repeat_n(' ', w - cell.chars().count()));
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut out = line(&mut headers.iter().copied());
    for row in rows {
        out += &line(&mut row.iter().map(String::as_str));
    }
    out
}

/// The age of `then` at `now` in kubectl's short form: `45s`, `5m30s`, `42m`, `3h12m`, `30h`,
/// `2d5h`, `120d`, `3y45d`. A time in the future counts as `0s`.
pub(crate) fn age(then: Timestamp, now: Timestamp) -> String {
    let secs = now.as_second().saturating_sub(then.as_second()).max(0);
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86_400);
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        match secs % 60 {
            0 => format!("{m}m"),
            s => format!("{m}m{s}s"),
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        match m % 60 {
            0 => format!("{h}h"),
            r => format!("{h}h{r}m"),
        }
    } else if h < 48 {
        format!("{h}h")
    } else if d < 8 {
        match h % 24 {
            0 => format!("{d}d"),
            r => format!("{d}d{r}h"),
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else {
        let (y, rd) = (d / 365, d % 365);
        if y < 8 && rd > 0 {
            format!("{y}y{rd}d")
        } else {
            format!("{y}y")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_kubectl() {
        let now: Timestamp = "2026-12-02T12:00:00Z".parse().unwrap();
        let at = |secs: i64| age(Timestamp::from_second(now.as_second() - secs).unwrap(), now);
        assert_eq!(at(-30), "0s");
        assert_eq!(at(45), "45s");
        assert_eq!(at(119), "119s");
        assert_eq!(at(330), "5m30s");
        assert_eq!(at(300), "5m");
        assert_eq!(at(42 * 60), "42m");
        assert_eq!(at(3 * 3600 + 12 * 60), "3h12m");
        assert_eq!(at(30 * 3600), "30h");
        assert_eq!(at(2 * 86_400 + 5 * 3600), "2d5h");
        assert_eq!(at(120 * 86_400), "120d");
        assert_eq!(at(3 * 365 * 86_400 + 45 * 86_400), "3y45d");
    }

    #[test]
    fn tables_align_without_trailing_blanks() {
        let t = table(
            &["NAME", "AGE", "NOTE"],
            &[
                vec!["a".into(), "5m".into(), String::new()],
                vec!["longer".into(), "3h12m".into(), "x".into()],
            ],
        );
        assert_eq!(
            t,
            "NAME     AGE     NOTE\na        5m\nlonger   3h12m   x\n"
        );
    }
}
