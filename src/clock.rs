//! Time as the router reads it: a process-wide monotonic clock for deadlines, ejections and
//! rates (it never jumps back with NTP), and the wall clock for what people read.
//!
//! A module of its own because every layer needs it: with it in `upstream::health`, the retry
//! budget imported health, which imported the regions, which imported the budget.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds on a process-wide monotonic clock (0 at its first reading).
pub fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// Milliseconds since the Unix epoch on the wall clock (0 if the clock is before it).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The wall clock as an HTTP-date (IMF-fixdate, RFC 9110 §5.6.7: `Sun, 06 Nov 1994 08:49:37
/// GMT`), for the `Date` a response must carry (§6.6.1); made at most once a second per
/// thread, as hyper's server does.
pub fn http_date() -> [u8; 29] {
    thread_local! {
        static MADE: std::cell::Cell<(u64, [u8; 29])> = const { std::cell::Cell::new((u64::MAX, [0; 29])) };
    }
    let secs = unix_ms() / 1000;
    MADE.with(|made| match made.get() {
        (at, text) if at == secs => text,
        _ => {
            let text = imf_fixdate(secs);
            made.set((secs, text));
            text
        }
    })
}

/// `secs` since the Unix epoch as an IMF-fixdate.
fn imf_fixdate(secs: u64) -> [u8; 29] {
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let at = i64::try_from(secs)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let text = format!(
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        DAYS[usize::from(at.weekday().number_days_from_monday())],
        at.day(),
        MONTHS[usize::from(u8::from(at.month()) - 1)],
        at.year().clamp(0, 9999),
        at.hour(),
        at.minute(),
        at.second()
    );
    let mut out = [b' '; 29];
    out.copy_from_slice(&text.as_bytes()[..29]);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_http_date_is_an_imf_fixdate() {
        // RFC 9110 §5.6.7's example.
        assert_eq!(
            &super::imf_fixdate(784_111_777),
            b"Sun, 06 Nov 1994 08:49:37 GMT"
        );
        assert_eq!(&super::imf_fixdate(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(
            &super::imf_fixdate(951_782_400),
            b"Tue, 29 Feb 2000 00:00:00 GMT"
        );
        assert_eq!(super::http_date().len(), 29);
    }
}
