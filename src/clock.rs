//! Wall-clock time in unix milliseconds, the unit of every timestamp in the API and store.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in unix ms. A clock set before 1970 reads as 0 rather than failing.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
