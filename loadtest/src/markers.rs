//! Measured figures written into a document (`docs/performance.md`)
//! between markers, so that a new measurement replaces the last one and
//! the text around it stays.

use std::path::Path;

use anyhow::Context;

/// Replaces what stands between `<!-- {name}:start -->` and
/// `<!-- {name}:end -->` in `file`, keeping the text around them; a file
/// without them gains them, with `measured` between, at its end.
pub fn write_between(file: &Path, name: &str, measured: &str) -> anyhow::Result<()> {
    let (start, end) = (
        format!("<!-- {name}:start -->"),
        format!("<!-- {name}:end -->"),
    );
    let existing = std::fs::read_to_string(file).unwrap_or_default();
    let text = match (existing.find(&start), existing.find(&end)) {
        (Some(from), Some(to)) if from < to => format!(
            "{}{start}\n{measured}{}",
            &existing[..from],
            &existing[to..]
        ),
        _ => format!("{existing}\n{start}\n{measured}{end}\n"),
    };
    std::fs::write(file, text).with_context(|| format!("cannot write {}", file.display()))
}
