//! An object's key-value storage, reached by the name of its exposed type.

use super::CallByNameError;
use crate::error::Error;
use crate::kv::KvError;
use crate::object::handle::Runtime;

/// A key-value operation's error, split into the runtime's and the storage's own.
fn split(error: Error<KvError>) -> CallByNameError {
    match error.split() {
        Ok(error) => CallByNameError::Runtime(error),
        Err(kv) => CallByNameError::Kv(kv),
    }
}

impl Runtime {
    /// [`kv_get`](Runtime::kv_get) on the exposed type named `type_name`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Cache { n: u32 }
    ///
    /// #[durable_object(expose)]
    /// impl Cache {}
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Cache>().build();
    /// rt.kv_put_by_name("Cache", "c", "k", b"[1]".to_vec()).await?;
    /// assert_eq!(rt.kv_get_by_name("Cache", "c", "k").await?, Some(b"[1]".to_vec()));
    /// assert_eq!(rt.kv_list_by_name("Cache", "c", "", None, 10).await?.len(), 1);
    /// rt.kv_delete_by_name("Cache", "c", "k").await?;
    /// assert_eq!(rt.kv_get_by_name("Cache", "c", "k").await?, None);
    /// # Ok(()) }
    /// ```
    pub async fn kv_get_by_name(
        &self,
        type_name: &str,
        id: &str,
        key: &str,
    ) -> Result<Option<Vec<u8>>, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        (entry.kv_get)(self, id, key).await.map_err(split)
    }

    /// [`kv_list`](Runtime::kv_list) on the exposed type named `type_name`.
    pub async fn kv_list_by_name(
        &self,
        type_name: &str,
        id: &str,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        (entry.kv_list)(self, id, prefix, start_after, limit)
            .await
            .map_err(split)
    }

    /// [`kv_put`](Runtime::kv_put) on the exposed type named `type_name`.
    pub async fn kv_put_by_name(
        &self,
        type_name: &str,
        id: &str,
        key: &str,
        value: Vec<u8>,
    ) -> Result<(), CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        (entry.kv_put)(self, id, key, value).await.map_err(split)
    }

    /// [`kv_delete`](Runtime::kv_delete) on the exposed type named `type_name`.
    pub async fn kv_delete_by_name(
        &self,
        type_name: &str,
        id: &str,
        key: &str,
    ) -> Result<(), CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        (entry.kv_delete)(self, id, key).await.map_err(split)
    }
}
