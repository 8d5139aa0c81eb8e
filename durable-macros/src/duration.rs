//! Human durations (`"250ms"`, `"5m"`, `"1h30m"`) parsed at compile time into whole
//! nanoseconds, with errors on the literal.

use darling::Error;
use syn::LitStr;

/// Examples quoted by every duration error.
const EXAMPLES: &str = "write a duration such as \"250ms\", \"30s\", \"5m\" or \"1h30m\"";

/// Parses the duration in `lit` into nanoseconds. A zero duration or one beyond `u64`
/// nanoseconds (about 584 years) is an error.
pub(crate) fn parse(lit: &LitStr) -> darling::Result<u64> {
    let text = lit.value();
    let duration = humantime::parse_duration(text.trim()).map_err(|error| {
        Error::custom(format!("invalid duration {text:?}: {error}; {EXAMPLES}")).with_span(lit)
    })?;
    if duration.is_zero() {
        return Err(Error::custom(format!(
            "the duration {text:?} is zero; give a positive duration, or remove the option to use the runtime's default"
        ))
        .with_span(lit));
    }
    u64::try_from(duration.as_nanos()).map_err(|_| {
        Error::custom(format!(
            "the duration {text:?} is too long: at most about 584 years fit"
        ))
        .with_span(lit)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(text: &str) -> LitStr {
        LitStr::new(text, proc_macro2::Span::call_site())
    }

    #[test]
    fn parses_human_durations() {
        assert_eq!(parse(&lit("250ms")).unwrap(), 250_000_000);
        assert_eq!(parse(&lit("5m")).unwrap(), 300_000_000_000);
        assert_eq!(parse(&lit("1h30m")).unwrap(), 5_400_000_000_000);
        assert_eq!(parse(&lit("1h 30m")).unwrap(), 5_400_000_000_000);
        assert_eq!(parse(&lit(" 2s ")).unwrap(), 2_000_000_000);
    }

    #[test]
    fn rejects_bad_durations() {
        for text in ["", "5", "5x", "m5", "0s", "0ms", "1000000years"] {
            assert!(parse(&lit(text)).is_err(), "{text:?} should be refused");
        }
    }
}
