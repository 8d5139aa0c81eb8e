//! [`PgTime`]: the store's codec for `timestamptz`, so that times are exact to the microsecond
//! both ways.

use std::time::SystemTime;

use durable_runtime::storage::StorageError;
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::types::Oid;
use sqlx::postgres::{
    PgArgumentBuffer, PgHasArrayType, PgTypeInfo, PgValueFormat, PgValueRef, Postgres,
};
use sqlx::{Decode, Encode, Type};

use crate::schema::{from_micros, to_micros};

/// A `timestamptz` as microseconds since the Unix epoch, sent and read in Postgres' binary
/// format (microseconds since 2000-01-01), so that every microsecond round-trips exactly.
#[derive(Clone, Copy, Debug)]
pub(super) struct PgTime(i64);

/// Microseconds from the Unix epoch to the Postgres epoch (2000-01-01T00:00:00Z).
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// `timestamptz`'s fixed OID.
const TIMESTAMPTZ_OID: u32 = 1184;

/// `timestamptz[]`'s fixed OID.
const TIMESTAMPTZ_ARRAY_OID: u32 = 1185;

impl PgTime {
    pub(super) fn new(time: SystemTime) -> Result<Self, StorageError> {
        to_micros(time).map(Self)
    }

    pub(super) fn get(self) -> Result<SystemTime, StorageError> {
        from_micros(self.0)
    }
}

impl Type<Postgres> for PgTime {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(Oid(TIMESTAMPTZ_OID))
    }
}

impl PgHasArrayType for PgTime {
    fn array_type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(Oid(TIMESTAMPTZ_ARRAY_OID))
    }
}

impl Encode<'_, Postgres> for PgTime {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        let since_pg_epoch = self
            .0
            .checked_sub(PG_EPOCH_MICROS)
            .ok_or("time out of range for timestamptz")?;
        <i64 as Encode<'_, Postgres>>::encode_by_ref(&since_pg_epoch, buf)
    }

    fn size_hint(&self) -> usize {
        8
    }
}

impl<'r> Decode<'r, Postgres> for PgTime {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        match value.format() {
            PgValueFormat::Binary => {
                let since_pg_epoch = <i64 as Decode<'r, Postgres>>::decode(value)?;
                if since_pg_epoch == i64::MAX || since_pg_epoch == i64::MIN {
                    return Err("infinite timestamptz".into());
                }
                Ok(Self(
                    since_pg_epoch
                        .checked_add(PG_EPOCH_MICROS)
                        .ok_or("timestamptz out of range")?,
                ))
            }
            PgValueFormat::Text => Err("timestamptz in text format is not supported".into()),
        }
    }
}
