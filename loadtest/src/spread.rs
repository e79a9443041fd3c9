//! A figure over rounds (the bench's, `loadtest --rounds`): its median and
//! its range, as every figure measured in rounds is given. The median of an
//! even number of measured figures is the mean of the two middle ones.

use std::fmt::Display;

use serde::Deserialize;

/// As results.json keeps it under `spread`, too.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct Spread<T> {
    pub median: T,
    pub min: T,
    pub max: T,
}

/// The median of an even number of values, from the two in the middle.
pub trait Middle: Copy {
    fn middle(lower: Self, upper: Self) -> Self;
}

impl Middle for f64 {
    fn middle(lower: f64, upper: f64) -> f64 {
        (lower + upper) / 2.0
    }
}

/// A count (the bench's instructions per request) stays one that a round
/// measured, so the rest of that round's figures go with it: the lower.
impl Middle for u64 {
    fn middle(lower: u64, _upper: u64) -> u64 {
        lower
    }
}

impl<T: Copy + PartialOrd + Middle> Spread<T> {
    /// The spread of `values`; `None` when there are none.
    pub fn of(values: impl IntoIterator<Item = T>) -> Option<Spread<T>> {
        let mut values: Vec<T> = values.into_iter().collect();
        values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        let (&min, &max) = (values.first()?, values.last()?);
        let half = values.len() / 2;
        let median = if values.len().is_multiple_of(2) {
            T::middle(values[half - 1], values[half])
        } else {
            values[half]
        };
        Some(Spread { median, min, max })
    }

    /// The median and, in brackets, the range, each written by `show`.
    pub fn show<S: Display>(&self, show: impl Fn(T) -> S) -> String {
        format!(
            "{} ({}–{})",
            show(self.median),
            show(self.min),
            show(self.max)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_is_the_median_and_the_range() {
        let spread = Spread::of([30u64, 10, 20]).unwrap();
        assert_eq!((spread.median, spread.min, spread.max), (20, 10, 30));
        assert_eq!(spread.show(|v| v), "20 (10–30)");
        assert!(Spread::<f64>::of([]).is_none());
        // Two rounds: the mean of both, not the higher.
        let two = Spread::of([12.0, 9.0]).unwrap();
        assert_eq!((two.median, two.min, two.max), (10.5, 9.0, 12.0));
        assert_eq!(Spread::of([4.0, 1.0, 3.0, 2.0]).unwrap().median, 2.5);
        assert_eq!(
            Spread::of([7u64, 5]).unwrap().median,
            5,
            "a count a round measured"
        );
    }
}
