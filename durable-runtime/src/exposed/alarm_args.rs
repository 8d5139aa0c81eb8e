//! The JSON argument of an alarm set by name: checked against the argument type of the
//! alarm's handler and encoded as stored, before anything is written.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::CallByNameError;

/// Decodes `args` (absent reads as `null`) as the argument type `A` of the alarm `alarm` and
/// encodes it as stored. A misfit is [`CallByNameError::BadArguments`].
pub fn alarm_arguments<A: Serialize + DeserializeOwned>(
    alarm: &'static str,
    args: Option<&Value>,
) -> Result<Option<Vec<u8>>, CallByNameError> {
    let bad = |path: String, message: String| CallByNameError::BadArguments {
        handler: alarm,
        path,
        message,
    };
    let value = args.cloned().unwrap_or(Value::Null);
    let decoded: A = serde_path_to_error::deserialize(value)
        .map_err(|error| bad(error.path().to_string(), error.inner().to_string()))?;
    let encoded =
        serde_json::to_vec(&decoded).map_err(|error| bad(".".into(), error.to_string()))?;
    Ok(Some(encoded))
}

/// The argument of an alarm whose handler takes none: absent, `null` or `{}` (as the
/// objects-as-a-service API sends for "no arguments"); anything else is refused.
pub fn no_alarm_arguments(
    alarm: &'static str,
    args: Option<&Value>,
) -> Result<Option<Vec<u8>>, CallByNameError> {
    match args {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(fields)) if fields.is_empty() => Ok(None),
        Some(_) => Err(CallByNameError::BadArguments {
            handler: alarm,
            path: ".".to_owned(),
            message: format!("the alarm `{alarm}` takes no arguments"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{alarm_arguments, no_alarm_arguments};

    #[test]
    fn arguments_are_checked_against_the_type_and_encoded_as_stored() {
        let stored = alarm_arguments::<u32>("remind", Some(&json!(7))).unwrap();
        assert_eq!(stored.as_deref(), Some(&b"7"[..]));
        assert!(alarm_arguments::<u32>("remind", Some(&json!("seven"))).is_err());
        assert!(alarm_arguments::<u32>("remind", None).is_err());
        let none = alarm_arguments::<Option<u32>>("remind", None).unwrap();
        assert_eq!(none.as_deref(), Some(&b"null"[..]));
        assert_eq!(no_alarm_arguments("ring", Some(&json!({}))).unwrap(), None);
        assert_eq!(no_alarm_arguments("ring", None).unwrap(), None);
        assert!(no_alarm_arguments("ring", Some(&json!({"n": 1}))).is_err());
    }
}
