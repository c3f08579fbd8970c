//! Cursor pagination for every list: `?limit=&cursor=` in, `next_cursor` out.
//!
//! Lists are ordered by their UUIDv7 ids, so a cursor is the last id seen,
//! opaque to clients (base64url), and a page is stable under inserts.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Select};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::error::ApiError;

pub const DEFAULT_LIMIT: u64 = 50;
pub const MAX_LIMIT: u64 = 200;

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Items per page, 1 to 200; 50 when absent.
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u64>,
    /// The `next_cursor` of the previous page; empty means the first page.
    #[param(pattern = "^([A-Za-z0-9_-]{22})?$")]
    pub cursor: Option<String>,
}

/// A validated page request.
#[derive(Debug, Clone, Copy)]
pub struct PageRequest {
    pub limit: u64,
    pub after: Option<Uuid>,
}

impl PageQuery {
    pub fn validate(&self) -> Result<PageRequest, ApiError> {
        let limit = self.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ApiError::bad_request(
                "invalid_limit",
                format!("limit must be between 1 and {MAX_LIMIT}"),
            ));
        }
        let after = match self.cursor.as_deref() {
            None | Some("") => None,
            Some(cursor) => Some(decode_cursor(cursor).ok_or_else(|| {
                ApiError::bad_request("invalid_cursor", "cursor is not one this server issued")
            })?),
        };
        Ok(PageRequest { limit, after })
    }
}

impl PageRequest {
    /// How many rows to fetch: one more than the page, to learn whether
    /// another page follows.
    fn fetch(&self) -> u64 {
        self.limit + 1
    }

    /// The rows after the cursor in ascending order of `key`.
    pub fn ascending<E: EntityTrait>(&self, select: Select<E>, key: E::Column) -> Select<E> {
        let select = match self.after {
            Some(after) => select.filter(key.gt(after)),
            None => select,
        };
        select.order_by_asc(key).limit(self.fetch())
    }

    /// The rows after the cursor in descending order of `key`.
    pub fn descending<E: EntityTrait>(&self, select: Select<E>, key: E::Column) -> Select<E> {
        let select = match self.after {
            Some(after) => select.filter(key.lt(after)),
            None => select,
        };
        select.order_by_desc(key).limit(self.fetch())
    }
}

/// One page of a list.
#[derive(Debug, Serialize, ToSchema)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

impl<T> Page<T> {
    /// Builds a page from up to `request.fetch()` rows in list order.
    pub fn from_rows<R>(
        mut rows: Vec<R>,
        request: PageRequest,
        id_of: impl Fn(&R) -> Uuid,
        view: impl FnMut(R) -> T,
    ) -> Self {
        let limit = usize::try_from(request.limit).unwrap_or(usize::MAX);
        let next_cursor = if rows.len() > limit {
            rows.truncate(limit);
            rows.last().map(|row| encode_cursor(id_of(row)))
        } else {
            None
        };
        Self {
            items: rows.into_iter().map(view).collect(),
            next_cursor,
        }
    }
}

fn encode_cursor(id: Uuid) -> String {
    URL_SAFE_NO_PAD.encode(id.as_bytes())
}

fn decode_cursor(cursor: &str) -> Option<Uuid> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    Uuid::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let id = Uuid::now_v7();
        assert_eq!(decode_cursor(&encode_cursor(id)), Some(id));
        let bad = PageQuery {
            limit: None,
            cursor: Some("!!".into()),
        };
        assert_eq!(bad.validate().unwrap_err().code(), "invalid_cursor");
        let zero = PageQuery {
            limit: Some(0),
            cursor: None,
        };
        assert_eq!(zero.validate().unwrap_err().code(), "invalid_limit");
    }

    #[test]
    fn a_full_fetch_yields_a_cursor_and_a_short_one_does_not() {
        let ids: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
        let request = PageRequest {
            limit: 2,
            after: None,
        };
        let page = Page::from_rows(ids.clone(), request, |id| *id, |id| id);
        assert_eq!(page.items, ids[..2]);
        assert_eq!(
            page.next_cursor.as_deref().and_then(decode_cursor),
            Some(ids[1])
        );
        let last = Page::from_rows(ids[2..].to_vec(), request, |id| *id, |id| id);
        assert!(last.next_cursor.is_none());
    }
}
