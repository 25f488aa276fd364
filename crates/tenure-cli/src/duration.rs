//! Durations on the command line: `30s`, `500ms`, `1.5s`, `2m`, `1h`.

use std::time::Duration;

/// Parses a number with a unit (`ms`, `s`, `m`, `h`); fractions are allowed.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("'{text}' has no unit: write e.g. 30s or 500ms"))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a duration: write e.g. 30s or 500ms"))?;
    let seconds = match unit.trim() {
        "ms" => number / 1000.0,
        "s" => number,
        "m" | "min" => number * 60.0,
        "h" => number * 3600.0,
        other => {
            return Err(format!(
                "unknown unit '{other}' in '{text}': use ms, s, m or h"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("'{text}' is out of range"))
}

/// Formats a duration for people: `2s`, `667ms`, `1.5s`.
pub fn human(duration: Duration) -> String {
    let ms = (duration.as_secs_f64() * 1000.0).round() as u128;
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        let seconds = format!("{:.2}", duration.as_secs_f64());
        format!("{}s", seconds.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_fractions() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("30").unwrap_err().contains("no unit"));
        assert!(parse_duration("3x").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("1e400s").is_err());
    }

    #[test]
    fn human_durations() {
        assert_eq!(human(Duration::from_secs(2)), "2s");
        assert_eq!(human(Duration::from_secs(2) / 3), "667ms");
        assert_eq!(human(Duration::from_millis(1500)), "1.5s");
        assert_eq!(human(Duration::from_millis(2250)), "2.25s");
    }
}
