//! A listing: stored entries with the changes not yet committed on top, page by page.

use std::collections::BTreeMap;

use crate::kv::staged::Staged;
use crate::storage::{ObjectKey, Storage, StorageError};

/// The most entries read from storage at once.
const PAGE: usize = 1_000;

/// Up to `limit` entries under `prefix` after `start_after`: storage's, with `overlay` (the
/// uncommitted changes under `prefix`) applied. Deleted keys may shorten a storage page, so
/// pages are read until `limit` entries are found or storage has no more.
pub(super) async fn merged(
    storage: &dyn Storage,
    object: &ObjectKey,
    overlay: Staged,
    prefix: &str,
    start_after: Option<&str>,
    limit: usize,
) -> Result<Vec<(String, Vec<u8>)>, StorageError> {
    let mut out = Vec::new();
    if limit == 0 {
        return Ok(out);
    }
    let mut rest = overlay.changes;
    if let Some(after) = start_after {
        // Only keys after `start_after` are listed.
        let mut later = rest.split_off(after);
        later.remove(after);
        rest = later;
    }
    let mut cursor = start_after.map(str::to_owned);
    loop {
        let page_size = limit.min(PAGE);
        let page = if overlay.cleared {
            Vec::new()
        } else {
            storage
                .kv_list(object, prefix, cursor.as_deref(), page_size)
                .await?
        };
        let exhausted = page.len() < page_size;
        let upper = if exhausted {
            None
        } else {
            page.last().map(|(key, _)| key.clone())
        };
        let mut merged: BTreeMap<String, Vec<u8>> = page.into_iter().collect();
        // The overlay's keys up to the page's last (all of them once storage has no more).
        let applied = match &upper {
            Some(upper) => {
                let mut beyond = rest.split_off(upper.as_str());
                if let Some(value) = beyond.remove(upper.as_str()) {
                    rest.insert(upper.clone(), value);
                }
                std::mem::replace(&mut rest, beyond)
            }
            None => std::mem::take(&mut rest),
        };
        for (key, value) in applied {
            match value {
                Some(value) => {
                    merged.insert(key, value);
                }
                None => {
                    merged.remove(&key);
                }
            }
        }
        out.extend(merged);
        if out.len() >= limit || upper.is_none() {
            out.truncate(limit);
            return Ok(out);
        }
        cursor = upper;
    }
}
