//! The four statements that list dead alarms across objects, shared by both stores: each
//! store writes them in its own SQL, and this picks the one a listing needs.

use sqlx::SqlStr;

/// The statements listing dead alarms across objects, ordered by type, id and name: the first
/// parameter is the page's row limit, then the type if filtered, then the position
/// `(type, id, name)` to start after if any.
#[derive(Debug)]
pub(crate) struct DeadAlarms {
    first: SqlStr,
    after: SqlStr,
    of_type_first: SqlStr,
    of_type_after: SqlStr,
}

impl DeadAlarms {
    /// The four statements, each written by `statement(of_type, after)`.
    pub(crate) fn build(mut statement: impl FnMut(bool, bool) -> SqlStr) -> Self {
        Self {
            first: statement(false, false),
            after: statement(false, true),
            of_type_first: statement(true, false),
            of_type_after: statement(true, true),
        }
    }

    /// The statement of a listing filtered by type or not, starting after a position or not.
    pub(crate) fn pick(&self, of_type: bool, after: bool) -> &SqlStr {
        match (of_type, after) {
            (true, true) => &self.of_type_after,
            (true, false) => &self.of_type_first,
            (false, true) => &self.after,
            (false, false) => &self.first,
        }
    }
}
