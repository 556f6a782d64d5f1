//! What both backends share about reading operations back: the cursor format and the decoding of
//! the text columns that hold enums.
//!
//! A cursor is the decimal `seq` of the last operation on the page. The listing is ordered by
//! `seq` alone, so "the rows after the cursor" is the index range `seq < cursor`: pages never
//! repeat or skip a row, whatever is inserted meanwhile, and no offset is ever scanned.

use std::str::FromStr;

/// The columns of an operation row, in the order both backends select them. A macro so that it
/// can be `concat!`ed into `&'static str` statements.
macro_rules! operation_columns {
    () => {
        "seq, id, request_id, created_at, finished_at, filename, kind, operation, status, \
         chosen_model, selection, arbiter_reason, candidates, previous_sha256, sha256, bytes, \
         error, duration_ms, detail, workspace"
    };
}

/// The columns of a request row, in the order both backends select them.
macro_rules! request_columns {
    () => {
        "id, received_at, route, caller, scope, idempotency_key, body_sha256, status, \
         finished_at, duration_ms, response, workspace"
    };
}

use writ_core::StoreError;
use writ_core::audit::Cursor;

pub(crate) fn encode_cursor(seq: i64) -> Cursor {
    Cursor(seq.to_string())
}

/// The `seq` a cursor stands for; anything this store could not have issued is refused.
pub(crate) fn decode_cursor(cursor: &Cursor) -> Result<i64, StoreError> {
    let text = &cursor.0;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(StoreError::InvalidCursor);
    }
    match text.parse::<i64>() {
        Ok(seq) if seq > 0 => Ok(seq),
        _ => Err(StoreError::InvalidCursor),
    }
}

/// How many rows to fetch for a page of `limit`: one more, to learn whether a next page exists.
pub(crate) fn fetch_size(limit: u32) -> i64 {
    i64::from(limit) + 1
}

/// Trims the extra row fetched by [`fetch_size`] and says where the next page starts.
pub(crate) fn into_page<T>(mut rows: Vec<(i64, T)>, limit: u32) -> (Vec<T>, Option<Cursor>) {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next = match rows.last() {
        Some((seq, _)) if more => Some(encode_cursor(*seq)),
        _ => None,
    };
    (rows.into_iter().map(|(_, item)| item).collect(), next)
}

/// Parses an enum stored as its `as_str` text; a value this build does not know is an error, not
/// a silent default, so an audit row is never misreported.
pub(crate) fn parse_column<T>(column: &str, value: &str) -> Result<T, StoreError>
where
    T: FromStr<Err = String>,
{
    value
        .parse()
        .map_err(|err: String| StoreError::Other(format!("column {column}: {err}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips() {
        assert_eq!(decode_cursor(&encode_cursor(42)).unwrap(), 42);
    }

    #[test]
    fn anything_but_a_positive_decimal_is_an_invalid_cursor() {
        for text in ["", "abc", "-1", "0", "+5", " 5", "99999999999999999999999"] {
            assert!(
                matches!(
                    decode_cursor(&Cursor(text.into())),
                    Err(StoreError::InvalidCursor)
                ),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_next_cursor_is_given_only_when_a_row_was_left_over() {
        let (items, next) = into_page(vec![(9, 'a'), (8, 'b'), (7, 'c')], 2);
        assert_eq!(items, vec!['a', 'b']);
        assert_eq!(next, Some(Cursor("8".into())));
        let (items, next) = into_page(vec![(9, 'a'), (8, 'b')], 2);
        assert_eq!(items.len(), 2);
        assert_eq!(next, None);
    }
}
