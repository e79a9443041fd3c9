//! The pieces of one `--fault` value, `KIND[=VALUE][@START[+DURATION]]`,
//! each asked for by the family whose kind it is, and the durations a spec
//! writes.

use std::time::Duration;

use anyhow::{Context, bail};

/// A spec split at `@`, `=` and `+`, not yet checked against its kind.
pub(super) struct Parts<'a> {
    pub(super) kind: &'a str,
    value: Option<&'a str>,
    when: Option<&'a str>,
}

impl<'a> Parts<'a> {
    pub(super) fn of(spec: &'a str) -> Parts<'a> {
        let (head, when) = match spec.split_once('@') {
            Some((head, when)) => (head, Some(when)),
            None => (spec, None),
        };
        let (kind, value) = match head.split_once('=') {
            Some((kind, value)) => (kind, Some(value)),
            None => (head, None),
        };
        Parts { kind, value, when }
    }

    /// `=MS`, more than 0.
    pub(super) fn ms(&self) -> anyhow::Result<u64> {
        let kind = self.kind;
        let value = self
            .value
            .with_context(|| format!("{kind} needs a value: {kind}=MS"))?;
        let ms = milliseconds(value)?;
        if ms == 0 {
            bail!("{kind}={value}: MS must be more than 0");
        }
        Ok(ms)
    }

    /// Fails when the spec has a `=VALUE`.
    pub(super) fn no_value(&self) -> anyhow::Result<()> {
        match self.value {
            Some(value) => bail!("{} takes no value, got ={value}", self.kind),
            None => Ok(()),
        }
    }

    /// Fails when the spec has an `@START`.
    pub(super) fn no_time(&self) -> anyhow::Result<()> {
        match self.when {
            Some(when) => bail!(
                "{} holds for the whole load, it takes no time: got @{when}",
                self.kind
            ),
            None => Ok(()),
        }
    }

    /// `@START+DURATION`, the duration more than 0.
    pub(super) fn window(&self) -> anyhow::Result<(Duration, Duration)> {
        let kind = self.kind;
        let when = self
            .when
            .with_context(|| format!("{kind} needs a time: {kind}@START+DURATION"))?;
        let (start, duration) = when
            .split_once('+')
            .with_context(|| format!("{kind}@{when} needs a duration: {kind}@START+DURATION"))?;
        let (start, duration) = (duration_of(start)?, duration_of(duration)?);
        if duration.is_zero() {
            bail!("{kind}@{when}: the duration must be more than 0");
        }
        Ok((start, duration))
    }

    /// `@START`, one moment.
    pub(super) fn instant(&self) -> anyhow::Result<Duration> {
        let kind = self.kind;
        let when = self
            .when
            .with_context(|| format!("{kind} needs a time: {kind}@START"))?;
        if when.contains('+') {
            bail!("{kind}@{when}: {kind} happens at one moment and takes no duration");
        }
        duration_of(when)
    }
}

/// The two faults of a node: killed at one moment, or paused for a while.
pub(super) enum KillOrPause {
    Kill { start: Duration },
    Pause { start: Duration, duration: Duration },
}

impl Parts<'_> {
    /// `kill@START` or `pause@START+DURATION`, neither taking a value;
    /// `None` when the kind is neither.
    pub(super) fn kill_or_pause(
        &self,
        kill: &str,
        pause: &str,
    ) -> Option<anyhow::Result<KillOrPause>> {
        let timed = if self.kind == kill {
            self.instant().map(|start| KillOrPause::Kill { start })
        } else if self.kind == pause {
            self.window()
                .map(|(start, duration)| KillOrPause::Pause { start, duration })
        } else {
            return None;
        };
        Some(self.no_value().and(timed))
    }
}

/// `300ms`, `0.3s`, `2s`, `1m`, `1.5m`.
fn duration_of(text: &str) -> anyhow::Result<Duration> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let wrong = || format!("{text:?} is no duration: write it like 300ms, 0.3s, 2s or 1m");
    let number: f64 = number.parse().with_context(wrong)?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "s" => number,
        "m" => number * 60.0,
        _ => bail!(wrong()),
    };
    Duration::try_from_secs_f64(seconds).with_context(wrong)
}

/// MS: `200` or a duration (`0.2s`), in whole milliseconds.
fn milliseconds(text: &str) -> anyhow::Result<u64> {
    if let Ok(ms) = text.parse::<u64>() {
        return Ok(ms);
    }
    let duration = duration_of(text)
        .with_context(|| format!("{text:?} is no number of milliseconds (200, or 0.2s)"))?;
    if !duration.as_nanos().is_multiple_of(1_000_000) {
        bail!("{text:?} is not a whole number of milliseconds");
    }
    Ok(duration.as_millis() as u64)
}

/// A duration as a spec writes it: `300ms`, or `0.0005s` below a millisecond.
pub(super) fn spec(duration: Duration) -> String {
    if duration.as_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", duration.as_millis())
    } else {
        format!("{}s", duration.as_secs_f64())
    }
}

/// A duration for a sentence: `1.5 s`.
pub(super) fn seconds(duration: Duration) -> String {
    format!("{} s", duration.as_secs_f64())
}
