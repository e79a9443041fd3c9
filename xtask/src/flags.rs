//! The `--flag value` arguments of the xtask commands that take a few
//! options (bench, idle, soak, api-check): each command matches the flags
//! it knows, and the walking, `--help` and the errors are said once here.

use std::fmt::Display;
use std::str::FromStr;

use anyhow::Context;

pub struct Flags<'a> {
    args: std::slice::Iter<'a, String>,
    usage: &'static str,
}

impl<'a> Flags<'a> {
    pub fn new(args: &'a [String], usage: &'static str) -> Self {
        Flags {
            args: args.iter(),
            usage,
        }
    }

    /// The next flag; `--help` (or `-h`) prints the usage and exits.
    pub fn next_flag(&mut self) -> Option<&'a str> {
        let flag = self.args.next()?;
        if flag == "--help" || flag == "-h" {
            println!("{}", self.usage);
            std::process::exit(0);
        }
        Some(flag)
    }

    /// The value that follows `flag`.
    pub fn value(&mut self, flag: &str) -> anyhow::Result<&'a str> {
        self.args
            .next()
            .map(String::as_str)
            .with_context(|| format!("{flag} needs a value; {}", self.usage))
    }

    /// The value that follows `flag`, read as a `T` (`what` says what it is
    /// when it is not one).
    pub fn parsed<T>(&mut self, flag: &str, what: &str) -> anyhow::Result<T>
    where
        T: FromStr,
        T::Err: Display,
    {
        let value = self.value(flag)?;
        value
            .parse()
            .map_err(|err| anyhow::anyhow!("{flag} {value:?}: {what} ({err})"))
    }

    /// The error for a flag the command does not know.
    pub fn unknown(&self, flag: &str) -> anyhow::Error {
        anyhow::anyhow!("unknown option {flag:?}; {}", self.usage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn flags_and_values_are_read_in_turn() {
        let given = args("--rounds 3 --out a.md");
        let mut flags = Flags::new(&given, "usage");
        assert_eq!(flags.next_flag(), Some("--rounds"));
        assert_eq!(flags.parsed::<u32>("--rounds", "a count").unwrap(), 3);
        assert_eq!(flags.next_flag(), Some("--out"));
        assert_eq!(flags.value("--out").unwrap(), "a.md");
        assert_eq!(flags.next_flag(), None);
    }

    #[test]
    fn a_missing_or_wrong_value_and_an_unknown_flag_say_which() {
        let given = args("--rounds many --seed");
        let mut flags = Flags::new(&given, "usage: x");
        flags.next_flag();
        let wrong = flags.parsed::<u32>("--rounds", "a count").unwrap_err();
        assert!(
            wrong.to_string().contains("--rounds \"many\": a count"),
            "{wrong}"
        );
        flags.next_flag();
        let missing = flags.value("--seed").unwrap_err().to_string();
        assert_eq!(missing, "--seed needs a value; usage: x");
        let unknown = flags.unknown("--colour").to_string();
        assert_eq!(unknown, "unknown option \"--colour\"; usage: x");
    }
}
