//! Durations as k6 and the reports write them: `500ms`, `10s`, `2m`, `1h`.

use anyhow::bail;

/// A duration as k6 and the reports write it, checked.
pub fn duration_text(text: &str) -> anyhow::Result<String> {
    seconds(text)?;
    Ok(text.to_string())
}

/// `500ms`, `10s`, `2m`, `1h` in seconds.
pub fn seconds(duration: &str) -> anyhow::Result<f64> {
    let (number, unit) = duration.split_at(
        duration
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(duration.len()),
    );
    let wrong = || format!("a duration looks like 500ms, 10s, 2m or 1h, got {duration}");
    let number: f64 = number.parse().map_err(|_| anyhow::anyhow!(wrong()))?;
    match unit {
        "ms" => Ok(number / 1000.0),
        "s" => Ok(number),
        "m" => Ok(number * 60.0),
        "h" => Ok(number * 3600.0),
        _ => bail!(wrong()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_the_load_runner_writes_them() {
        assert_eq!(seconds("500ms").unwrap(), 0.5);
        assert_eq!(seconds("2m").unwrap(), 120.0);
        assert_eq!(seconds("1h").unwrap(), 3600.0);
        assert!(seconds("1.5s").is_err() && seconds("10").is_err());
    }
}
