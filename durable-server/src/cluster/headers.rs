//! The headers of a forwarded call: the cluster's shared secret, the time left to the
//! caller's deadline and the hop count, and how they are read.

use std::time::Duration;

use axum::http::HeaderMap;

/// The header carrying the cluster's shared secret.
pub const SECRET: &str = "durable-cluster-secret";
/// The header carrying the time left to the caller's deadline, in whole milliseconds.
pub const DEADLINE_MS: &str = "durable-deadline-ms";
/// The header carrying the number of nodes the call was sent to, this one included (1 for a
/// first send).
pub const HOPS: &str = "durable-hops";

/// What a forwarded call's headers say about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CallHeaders {
    /// How long the caller still waits, if it said.
    pub(crate) deadline: Option<Duration>,
    /// The hop count.
    pub(crate) hops: u32,
    /// The idempotency key, if any.
    pub(crate) idempotency_key: Option<String>,
}

/// Why a forwarded call's headers were refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HeaderError {
    /// A header is not text, or not a number where one is expected.
    #[error("the header `{0}` is malformed")]
    Malformed(&'static str),
    /// The hop count is missing, or zero.
    #[error("the header `{HOPS}` is missing or zero")]
    NoHops,
}

impl CallHeaders {
    /// Reads the deadline, hop count and idempotency key of a forwarded call.
    pub(crate) fn parse(headers: &HeaderMap) -> Result<Self, HeaderError> {
        let text = |name: &'static str| -> Result<Option<&str>, HeaderError> {
            headers
                .get(name)
                .map(|value| value.to_str().map_err(|_| HeaderError::Malformed(name)))
                .transpose()
        };
        let number = |name: &'static str| -> Result<Option<u64>, HeaderError> {
            text(name)?
                .map(|value| {
                    value
                        .trim()
                        .parse::<u64>()
                        .map_err(|_| HeaderError::Malformed(name))
                })
                .transpose()
        };
        let deadline = number(DEADLINE_MS)?.map(Duration::from_millis);
        let hops = match number(HOPS)? {
            None | Some(0) => return Err(HeaderError::NoHops),
            Some(hops) => u32::try_from(hops).map_err(|_| HeaderError::Malformed(HOPS))?,
        };
        let idempotency_key = text(crate::routes::objects::IDEMPOTENCY_KEY)?.map(str::to_owned);
        Ok(Self {
            deadline,
            hops,
            idempotency_key,
        })
    }
}

/// The deadline header's value for `left`: whole milliseconds, rounded up so that a call with
/// time left is never sent as already late.
pub(crate) fn deadline_value(left: Duration) -> u64 {
    let millis = left.as_micros().div_ceil(1000);
    u64::try_from(millis).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::http::{HeaderMap, HeaderValue};

    use super::{CallHeaders, DEADLINE_MS, HOPS, HeaderError, deadline_value};

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn a_full_set_of_headers_is_read() {
        let parsed = CallHeaders::parse(&headers(&[
            (DEADLINE_MS, "1500"),
            (HOPS, "2"),
            ("idempotency-key", "k-1"),
        ]))
        .unwrap();
        assert_eq!(
            parsed,
            CallHeaders {
                deadline: Some(Duration::from_millis(1500)),
                hops: 2,
                idempotency_key: Some("k-1".to_owned()),
            }
        );
    }

    #[test]
    fn the_deadline_and_key_are_optional_the_hops_are_not() {
        let parsed = CallHeaders::parse(&headers(&[(HOPS, "1")])).unwrap();
        assert_eq!((parsed.deadline, parsed.hops), (None, 1));
        assert_eq!(parsed.idempotency_key, None);
        assert_eq!(CallHeaders::parse(&headers(&[])), Err(HeaderError::NoHops));
        assert_eq!(
            CallHeaders::parse(&headers(&[(HOPS, "0")])),
            Err(HeaderError::NoHops)
        );
    }

    #[test]
    fn malformed_numbers_are_refused() {
        for (name, value) in [
            (DEADLINE_MS, "soon"),
            (DEADLINE_MS, "-5"),
            (DEADLINE_MS, "1.5"),
            (HOPS, "two"),
            (HOPS, "99999999999"),
        ] {
            let mut pairs = vec![(name, value)];
            if name != HOPS {
                pairs.push((HOPS, "1"));
            }
            assert_eq!(
                CallHeaders::parse(&headers(&pairs)),
                Err(HeaderError::Malformed(name)),
                "{name}: {value}"
            );
        }
    }

    #[test]
    fn the_deadline_is_rounded_up_to_the_millisecond() {
        assert_eq!(deadline_value(Duration::from_micros(1)), 1);
        assert_eq!(deadline_value(Duration::from_millis(250)), 250);
        assert_eq!(deadline_value(Duration::from_micros(250_001)), 251);
        assert_eq!(deadline_value(Duration::ZERO), 0);
    }
}
