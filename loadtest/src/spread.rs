//! A figure over rounds (the bench's, `loadtest --rounds`): its median and
//! its range, as every figure measured in rounds is given.

use std::fmt::Display;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread<T> {
    pub median: T,
    pub min: T,
    pub max: T,
}

impl<T: Copy + PartialOrd> Spread<T> {
    /// The spread of `values`; `None` when there are none.
    pub fn of(values: impl IntoIterator<Item = T>) -> Option<Spread<T>> {
        let mut values: Vec<T> = values.into_iter().collect();
        values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        let (&min, &max) = (values.first()?, values.last()?);
        Some(Spread {
            median: values[values.len() / 2],
            min,
            max,
        })
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
        let spread = Spread::of([30, 10, 20]).unwrap();
        assert_eq!((spread.median, spread.min, spread.max), (20, 10, 30));
        assert_eq!(spread.show(|v| v), "20 (10–30)");
        assert!(Spread::<f64>::of([]).is_none());
    }
}
