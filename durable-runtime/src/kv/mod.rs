//! Key-value storage per object: [`KvStorage`], what a handler reaches through
//! [`Context::storage`](crate::Context::storage).
//!
//! Values live in a table of their own, next to the object's state, rather than inside it:
//! the state is encoded and compared after every `&mut self` call, which suits kilobytes, not
//! a map of thousands of entries. A call's changes are staged in its context and travel in the
//! same write as its state, so they commit in the same transaction, under the same version
//! check, and are rolled back with the state when the handler fails or the commit does.

mod list;
mod outside;
pub(crate) mod staged;
pub(crate) mod view;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::object::context::Context;
use crate::storage::{ObjectKey, StorageError};
use view::Known;

/// The default most keys per object.
pub const DEFAULT_MAX_KEYS: u64 = 10_000;
/// The default largest encoded value, in bytes (1 MiB).
pub const DEFAULT_MAX_VALUE_BYTES: u64 = 1 << 20;
/// The default most bytes per object, keys and values together (50 MiB).
pub const DEFAULT_MAX_BYTES: u64 = 50 << 20;
/// The default byte budget of a live object's read cache (1 MiB).
pub const DEFAULT_CACHE_BYTES: u64 = 1 << 20;

/// The key-value limits of one object type, every default applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KvLimits {
    pub(crate) max_keys: u64,
    pub(crate) max_value_bytes: u64,
    pub(crate) max_bytes: u64,
    pub(crate) cache_bytes: u64,
}

impl Default for KvLimits {
    fn default() -> Self {
        Self {
            max_keys: DEFAULT_MAX_KEYS,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            max_bytes: DEFAULT_MAX_BYTES,
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }
}

/// What went wrong with a key-value operation in a handler.
///
/// The per-object limits of key count and total bytes are checked when the call's write
/// commits, and a write that exceeds one fails the call with
/// [`Error::KvLimit`](crate::Error::KvLimit) instead.
///
/// # Examples
///
/// ```
/// use durable_runtime::KvError;
///
/// let err = KvError::ValueTooLarge { key: "blob".into(), size: 2_000_000, max: 1 << 20 };
/// assert_eq!(
///     err.to_string(),
///     "the value of key \"blob\" is 2000000 bytes, more than the limit of 1048576"
/// );
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    /// The encoded value is larger than the type's limit; nothing was staged.
    #[error("the value of key {key:?} is {size} bytes, more than the limit of {max}")]
    ValueTooLarge {
        /// The key.
        key: String,
        /// The encoded value's size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// A change from a `&self` handler, which cannot write.
    #[error("key-value storage can only be changed by `&mut self` handlers, hooks and alarms")]
    ReadOnly,
    /// The value could not be encoded as JSON.
    #[error("the value of key {key:?} cannot be encoded: {message}")]
    Encode {
        /// The key.
        key: String,
        /// The serializer's message.
        message: String,
    },
    /// The stored value does not decode as the type asked for.
    #[error("the value of key {key:?} does not decode: {message}")]
    Decode {
        /// The key.
        key: String,
        /// The deserializer's message.
        message: String,
    },
    /// Reading storage failed.
    #[error("reading the key-value storage of {object} failed: {source}")]
    Storage {
        /// The object.
        object: ObjectKey,
        /// What failed.
        #[source]
        source: StorageError,
    },
}

/// An object's key-value storage, as a handler sees it: stored values with the changes of the
/// calls before (committed or not) and of the call itself on top.
///
/// Values are serde values, stored as JSON. Reads are async (a value not cached is read from
/// storage); changes are staged in the call and committed with its state.
///
/// # Examples
///
/// ```
/// use durable_runtime::{Context, KvError, MemoryStorage, Runtime, durable_object};
///
/// #[durable_object]
/// pub struct Notes {
///     count: u64,
/// }
///
/// #[durable_object]
/// impl Notes {
///     #[handler]
///     async fn handle_add(&mut self, ctx: &Context, text: String) -> Result<u64, KvError> {
///         self.count += 1;
///         ctx.storage().put(&format!("note:{:04}", self.count), &text)?;
///         Ok(self.count)
///     }
///
///     #[handler]
///     async fn handle_all(&self, ctx: &Context) -> Result<Vec<String>, KvError> {
///         let notes = ctx.storage().list::<String>("note:", None, 100).await?;
///         Ok(notes.into_iter().map(|(_, text)| text).collect())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let rt = Runtime::builder(MemoryStorage::new()).register::<Notes>().build();
/// Notes::add(&rt, "n1", "milk".into()).await?;
/// Notes::add(&rt, "n1", "eggs".into()).await?;
/// assert_eq!(Notes::all(&rt, "n1").await?, ["milk", "eggs"]);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct KvStorage<'a> {
    ctx: &'a Context,
}

impl<'a> KvStorage<'a> {
    pub(crate) fn new(ctx: &'a Context) -> Self {
        Self { ctx }
    }

    /// The value stored under `key`, decoded as `T`.
    ///
    /// # Errors
    ///
    /// [`KvError::Decode`] if the value is not a `T`, [`KvError::Storage`] if storage could
    /// not be read.
    pub async fn get<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, KvError> {
        let Some(bytes) = self.get_raw(key).await? else {
            return Ok(None);
        };
        decode(key, &bytes).map(Some)
    }

    /// The encoded (JSON) value stored under `key`.
    ///
    /// # Errors
    ///
    /// [`KvError::Storage`] if storage could not be read.
    pub async fn get_raw(&self, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        if let Some(staged) = self.ctx.staged_kv().lookup(key) {
            return Ok(staged.map(<[u8]>::to_vec));
        }
        let cell = self.ctx.kv_cell();
        let ticket = match cell.lookup(key) {
            Known::Value(value) => return Ok(value),
            Known::Unknown(ticket) => ticket,
        };
        let object = self.ctx.key();
        let value = self
            .ctx
            .runtime()
            .storage()
            .kv_get(object, key)
            .await
            .map_err(|source| KvError::Storage {
                object: object.clone(),
                source,
            })?;
        cell.cache(ticket, key, value.as_deref());
        Ok(value)
    }

    /// Stores `value` under `key`, replacing what is there, when the call's write commits.
    ///
    /// # Errors
    ///
    /// [`KvError::ValueTooLarge`] if the encoded value exceeds the type's limit (1 MiB by
    /// default), [`KvError::ReadOnly`] from a `&self` handler, [`KvError::Encode`] if `value`
    /// does not encode. Nothing is staged then.
    pub fn put<T: Serialize + ?Sized>(&self, key: &str, value: &T) -> Result<(), KvError> {
        let encoded = serde_json::to_vec(value).map_err(|err| KvError::Encode {
            key: key.to_owned(),
            message: err.to_string(),
        })?;
        self.stage_put(key, encoded)
    }

    /// Stores an already encoded (JSON) value under `key`, as [`put`](Self::put) does.
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put), and [`KvError::Encode`] if `value` is not JSON.
    pub fn put_raw(&self, key: &str, value: Vec<u8>) -> Result<(), KvError> {
        if let Err(err) = serde_json::from_slice::<serde::de::IgnoredAny>(&value) {
            return Err(KvError::Encode {
                key: key.to_owned(),
                message: format!("not JSON: {err}"),
            });
        }
        self.stage_put(key, value)
    }

    fn stage_put(&self, key: &str, value: Vec<u8>) -> Result<(), KvError> {
        self.check_writable()?;
        let max = self.ctx.kv_cell().limits.max_value_bytes;
        let size = value.len() as u64;
        if size > max {
            return Err(KvError::ValueTooLarge {
                key: key.to_owned(),
                size,
                max,
            });
        }
        self.ctx.staged_kv().put(key, value);
        Ok(())
    }

    /// Removes `key` when the call's write commits.
    ///
    /// # Errors
    ///
    /// [`KvError::ReadOnly`] from a `&self` handler.
    pub fn delete(&self, key: &str) -> Result<(), KvError> {
        self.check_writable()?;
        self.ctx.staged_kv().delete(key);
        Ok(())
    }

    /// Removes every key when the call's write commits.
    ///
    /// # Errors
    ///
    /// [`KvError::ReadOnly`] from a `&self` handler.
    pub fn delete_all(&self) -> Result<(), KvError> {
        self.check_writable()?;
        self.ctx.staged_kv().delete_all();
        Ok(())
    }

    /// Up to `limit` entries whose keys start with `prefix` and come after `start_after`
    /// (if given), in the order of the keys' bytes, decoded as `T`. The last key of a page is
    /// the `start_after` of the next.
    ///
    /// # Errors
    ///
    /// [`KvError::Decode`] if a value is not a `T`, [`KvError::Storage`] if storage could
    /// not be read.
    pub async fn list<T: DeserializeOwned>(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, T)>, KvError> {
        self.list_raw(prefix, start_after, limit)
            .await?
            .into_iter()
            .map(|(key, bytes)| {
                let value = decode(&key, &bytes)?;
                Ok((key, value))
            })
            .collect()
    }

    /// [`list`](Self::list) with the encoded (JSON) values.
    ///
    /// # Errors
    ///
    /// [`KvError::Storage`] if storage could not be read.
    pub async fn list_raw(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, KvError> {
        let mut overlay = self.ctx.kv_cell().pending(prefix);
        {
            let staged = self.ctx.staged_kv();
            let own = staged::Staged {
                cleared: staged.cleared,
                changes: staged
                    .changes
                    .range::<str, _>((
                        std::ops::Bound::Included(prefix),
                        std::ops::Bound::Unbounded,
                    ))
                    .take_while(|(key, _)| key.starts_with(prefix))
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect(),
            };
            overlay.absorb(own);
        }
        let object = self.ctx.key();
        list::merged(
            self.ctx.runtime().storage().as_ref(),
            object,
            overlay,
            prefix,
            start_after,
            limit,
        )
        .await
        .map_err(|source| KvError::Storage {
            object: object.clone(),
            source,
        })
    }

    fn check_writable(&self) -> Result<(), KvError> {
        if self.ctx.is_writable() {
            Ok(())
        } else {
            Err(KvError::ReadOnly)
        }
    }
}

fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T, KvError> {
    serde_json::from_slice(bytes).map_err(|err| KvError::Decode {
        key: key.to_owned(),
        message: err.to_string(),
    })
}
