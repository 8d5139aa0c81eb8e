//! An object's key-value storage reached from outside its handlers: each operation runs as a
//! call on the object, ordered with its other calls, so that it sees and makes changes exactly
//! as a handler would (a write commits with the object's version check and limits).

use crate::activation::call::{Access, AsyncBody, SyncBody, call};
use crate::error::Error;
use crate::kv::KvError;
use crate::object::DurableObject;
use crate::object::context::Context;
use crate::object::handle::Runtime;

impl Runtime {
    /// The encoded (JSON) value under `key` in the storage of the object `(O, id)`, read
    /// through the object.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Cache { n: u32 }
    ///
    /// #[durable_object]
    /// impl Cache {}
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// rt.kv_put::<Cache>("c", "greeting", b"\"hi\"".to_vec()).await?;
    /// assert_eq!(rt.kv_get::<Cache>("c", "greeting").await?, Some(b"\"hi\"".to_vec()));
    /// let listed = rt.kv_list::<Cache>("c", "", None, 10).await?;
    /// assert_eq!(listed.len(), 1);
    /// rt.kv_delete::<Cache>("c", "greeting").await?;
    /// assert_eq!(rt.kv_get::<Cache>("c", "greeting").await?, None);
    /// # Ok(()) }
    /// ```
    pub async fn kv_get<O: DurableObject>(
        &self,
        id: &str,
        key: &str,
    ) -> Result<Option<Vec<u8>>, Error<KvError>> {
        let key = key.to_owned();
        let body = AsyncBody::new(move |_: &mut O, ctx: &Context| {
            Box::pin(async move { ctx.storage().get_raw(&key).await })
        });
        call::<O, _, KvError, _>(self, id, Access::Read, "kv_get", body).await
    }

    /// Up to `limit` entries (encoded values) under `prefix` after `start_after` in the storage
    /// of `(O, id)`, read through the object (see [`kv_get`](Self::kv_get)).
    pub async fn kv_list<O: DurableObject>(
        &self,
        id: &str,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, Error<KvError>> {
        let prefix = prefix.to_owned();
        let start_after = start_after.map(str::to_owned);
        let body = AsyncBody::new(move |_: &mut O, ctx: &Context| {
            Box::pin(async move {
                ctx.storage()
                    .list_raw(&prefix, start_after.as_deref(), limit)
                    .await
            })
        });
        call::<O, _, KvError, _>(self, id, Access::Read, "kv_list", body).await
    }

    /// Stores an encoded (JSON) value under `key` in the storage of `(O, id)`, through the
    /// object: committed like a handler's change, with the type's limits (see
    /// [`kv_get`](Self::kv_get)).
    pub async fn kv_put<O: DurableObject>(
        &self,
        id: &str,
        key: &str,
        value: Vec<u8>,
    ) -> Result<(), Error<KvError>> {
        let key = key.to_owned();
        let body = SyncBody(move |_: &mut O, ctx: &Context| ctx.storage().put_raw(&key, value));
        call::<O, _, KvError, _>(self, id, Access::Write, "kv_put", body).await
    }

    /// Removes `key` from the storage of `(O, id)`, through the object (see
    /// [`kv_get`](Self::kv_get)).
    pub async fn kv_delete<O: DurableObject>(
        &self,
        id: &str,
        key: &str,
    ) -> Result<(), Error<KvError>> {
        let key = key.to_owned();
        let body = SyncBody(move |_: &mut O, ctx: &Context| ctx.storage().delete(&key));
        call::<O, _, KvError, _>(self, id, Access::Write, "kv_delete", body).await
    }
}
